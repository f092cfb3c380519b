#include "bundle.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace lw {

using json = nlohmann::ordered_json;

static const char * kFormat  = "layer-bundle";
static const char * kVersion = "1";

static size_t dtype_size(const std::string & dtype) {
    if (dtype == "F32" || dtype == "I32") {
        return 4;
    }
    if (dtype == "F16" || dtype == "BF16") {
        return 2;
    }
    return 0;
}

// an all-ones exponent is an infinity or a NaN
static bool f16_is_finite(uint16_t h) {
    return ((h >> 10) & 0x1f) != 0x1f;
}

static bool bf16_is_finite(uint16_t h) {
    return ((h >> 7) & 0xff) != 0xff;
}

// an all-ones exponent is an infinity or a NaN: adding one to the exponent then carries into the sign bit;
// branch-free, OR-reduced and not inlined into the decoder, so that the loop vectorizes
[[gnu::noinline]] static bool f32_all_finite(const uint8_t * p, size_t n) {
    uint32_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
        uint32_t w;
        memcpy(&w, p + 4*i, 4);
        bad |= ((w & 0x7f800000u) + 0x00800000u) & 0x80000000u;
    }
    return bad == 0;
}

static bool all_finite(const bundle_tensor & t) {
    const size_t n = t.size / dtype_size(t.dtype);
    if (t.dtype == "F32") {
        return f32_all_finite(t.data, n);
    }
    for (size_t i = 0; i < n; ++i) {
        const uint16_t h = (uint16_t) (t.data[2*i] | (t.data[2*i + 1] << 8));
        if ((t.dtype == "F16" && !f16_is_finite(h)) || (t.dtype == "BF16" && !bf16_is_finite(h))) {
            return false;
        }
    }
    return true;
}

std::vector<uint8_t> bundle_encode(const bundle & b) {
    json header = json::object();
    json meta = json::object();
    meta["format"]     = kFormat;
    meta["version"]    = kVersion;
    meta["byte_order"] = "little";
    for (const auto & [k, v] : b.meta) {
        meta[k] = v;
    }
    header["__metadata__"] = meta;
    uint64_t offset = 0;
    for (const auto & [name, t] : b.tensors) {
        header[name] = { {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.size}} };
        offset += t.size;
    }
    std::string text = header.dump();
    while (text.size() % 8 != 0) {
        text.push_back(' ');
    }
    // appended, not zero-filled first: the tensor bytes are written once
    std::vector<uint8_t> out;
    out.reserve(8 + text.size() + offset);
    const uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) {
        out.push_back((uint8_t) (n >> (8*i)));
    }
    out.insert(out.end(), text.begin(), text.end());
    for (const auto & [_, t] : b.tensors) {
        out.insert(out.end(), t.data, t.data + t.size);
    }
    return out;
}

[[noreturn]] static void fail(const std::string & msg) {
    throw std::runtime_error("invalid bundle: " + msg);
}

bundle bundle_decode(const uint8_t * data, size_t size, uint64_t max_size) {
    if (size > max_size) {
        fail("oversized: " + std::to_string(size) + " bytes, the limit is " + std::to_string(max_size));
    }
    if (size < 8) {
        fail("truncated: " + std::to_string(size) + " bytes, shorter than the 8-byte header size");
    }
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) {
        n |= (uint64_t) data[i] << (8*i);
    }
    if (n < 2 || n > kBundleMaxHeader) {
        fail("header size " + std::to_string(n) + " is out of range [2, " + std::to_string(kBundleMaxHeader) + "]");
    }
    if (n > size - 8) {
        fail("truncated: the header needs " + std::to_string(n) + " bytes, " + std::to_string(size - 8) + " remain");
    }
    json header;
    try {
        header = json::parse(data + 8, data + 8 + n);
    } catch (const std::exception & e) {
        fail(std::string("header is not JSON: ") + e.what());
    }
    if (!header.is_object()) {
        fail("header is not a JSON object");
    }
    if (!header.contains("__metadata__") || !header["__metadata__"].is_object()) {
        fail("no __metadata__");
    }
    bundle b;
    for (const auto & [k, v] : header["__metadata__"].items()) {
        if (!v.is_string()) {
            fail("metadata '" + k + "' is not a string");
        }
        b.meta[k] = v.get<std::string>();
    }
    if (b.meta["format"] != kFormat) {
        fail("format '" + b.meta["format"] + "' is not '" + kFormat + "'");
    }
    if (b.meta["version"] != kVersion) {
        fail("unknown version '" + b.meta["version"] + "' (this decoder reads version " + kVersion + ")");
    }
    if (b.meta["byte_order"] != "little") {
        fail("unsupported byte_order '" + b.meta["byte_order"] + "' (only little)");
    }
    for (const char * k : {"format", "version", "byte_order"}) {
        b.meta.erase(k);
    }

    const uint8_t * base = data + 8 + n;
    const uint64_t n_data = size - 8 - n;

    // tensors in data order
    std::vector<std::pair<uint64_t, std::string>> order;
    for (const auto & [name, info] : header.items()) {
        if (name == "__metadata__") {
            continue;
        }
        if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets")) {
            fail("tensor '" + name + "' needs dtype, shape and data_offsets");
        }
        bundle_tensor t;
        if (!info["dtype"].is_string() || dtype_size(info["dtype"].get<std::string>()) == 0) {
            fail("tensor '" + name + "' has an unknown dtype " + info["dtype"].dump());
        }
        t.dtype = info["dtype"].get<std::string>();
        if (!info["shape"].is_array()) {
            fail("tensor '" + name + "' has a shape that is not a list");
        }
        uint64_t n_elem = 1;
        for (const auto & d : info["shape"]) {
            if (!d.is_number_unsigned()) {
                fail("tensor '" + name + "' has a dimension that is not a non-negative integer: " + d.dump());
            }
            const uint64_t v = d.get<uint64_t>();
            if (v != 0 && n_elem > (max_size / v)) {
                fail("tensor '" + name + "' is oversized");
            }
            n_elem *= v;
            t.shape.push_back((int64_t) v);
        }
        const auto & off = info["data_offsets"];
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
            fail("tensor '" + name + "' has invalid data_offsets");
        }
        const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
        if (begin > end || end > n_data) {
            fail("tensor '" + name + "' data [" + std::to_string(begin) + ", " + std::to_string(end) +
                 ") is outside the " + std::to_string(n_data) + " data bytes (truncated)");
        }
        if (end - begin != n_elem * dtype_size(t.dtype)) {
            fail("tensor '" + name + "' has " + std::to_string(end - begin) + " bytes, its shape needs " +
                 std::to_string(n_elem * dtype_size(t.dtype)));
        }
        t.data = base + begin;
        t.size = end - begin;
        if (!all_finite(t)) {
            fail("tensor '" + name + "' has non-finite values");
        }
        order.emplace_back(begin, name);
        b.tensors[name] = std::move(t);
    }
    std::sort(order.begin(), order.end());
    uint64_t expect = 0;
    for (const auto & [begin, name] : order) {
        if (begin != expect) {
            fail(begin > expect ? "a gap before tensor '" + name + "'" : "tensor '" + name + "' overlaps the previous one");
        }
        expect += b.tensors[name].size;
    }
    if (expect != n_data) {
        fail(std::to_string(n_data - expect) + " trailing bytes after the last tensor");
    }
    const auto n_tokens = b.meta.find("n_tokens");
    if (n_tokens != b.meta.end()) {
        for (const auto & [name, t] : b.tensors) {
            if (t.shape.empty() || std::to_string(t.shape[0]) != n_tokens->second) {
                fail("tensor '" + name + "' does not have n_tokens = " + n_tokens->second + " rows");
            }
        }
    }
    return b;
}

} // namespace lw
