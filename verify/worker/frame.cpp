#include "frame.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

namespace lw {

static uint32_t get_u32le(const uint8_t * p) {
    return (uint32_t) p[0] | ((uint32_t) p[1] << 8) | ((uint32_t) p[2] << 16) | ((uint32_t) p[3] << 24);
}

static uint64_t get_u64le(const uint8_t * p) {
    return (uint64_t) get_u32le(p) | ((uint64_t) get_u32le(p + 4) << 32);
}

static void put_u32le(uint8_t * p, uint32_t v) {
    for (int i = 0; i < 4; ++i) {
        p[i] = (uint8_t) (v >> (8*i));
    }
}

static void put_u64le(uint8_t * p, uint64_t v) {
    for (int i = 0; i < 8; ++i) {
        p[i] = (uint8_t) (v >> (8*i));
    }
}

bool frame_reader::fill(size_t n) {
    while (buf_.size() - pos_ < n) {
        if (eof_) {
            return false;
        }
        if (pos_ > 0 && pos_ == buf_.size()) {
            buf_.clear();
            pos_ = 0;
        }
        if (fd_ < 0) {
            buf_.insert(buf_.end(), mem_, mem_ + mem_size_);
            mem_size_ = 0;
            eof_      = true;
            continue;
        }
        uint8_t tmp[1 << 16];
        const ssize_t r = ::read(fd_, tmp, sizeof(tmp));
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            eof_ = true;
            return false;
        }
        if (r == 0) {
            eof_ = true;
            return false;
        }
        buf_.insert(buf_.end(), tmp, tmp + r);
    }
    return true;
}

void frame_reader::wait_readable() {
    if (pos_ < buf_.size() || eof_ || fd_ < 0) {
        return;
    }
    pollfd p = { fd_, POLLIN, 0 };
    while (poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
}

bool frame_reader::skip_to_magic() {
    for (;;) {
        if (!fill(sizeof(kMagic))) {
            pos_ = buf_.size();
            return false;
        }
        if (memcmp(buf_.data() + pos_, kMagic, sizeof(kMagic)) == 0) {
            return true;
        }
        pos_++;
    }
}

read_status frame_reader::read(frame & out, std::string & error) {
    if (resync_) {
        resync_ = false;
        if (!skip_to_magic()) {
            return read_status::eof;
        }
    }
    if (!fill(1)) {
        return read_status::eof;
    }
    // refuse garbage as soon as its first bytes differ from the magic, without waiting for a whole prefix
    const size_t avail = std::min(buf_.size() - pos_, sizeof(kMagic));
    if (memcmp(buf_.data() + pos_, kMagic, avail) != 0) {
        error = "bytes that do not start with the frame magic 'LWP1'; skipped to the next frame";
        pos_++;
        resync_ = true;
        return read_status::bad_magic;
    }
    if (!fill(16)) {
        error = "stream ended inside a frame prefix";
        pos_ = buf_.size();
        return read_status::truncated;
    }
    const uint8_t * p = buf_.data() + pos_;
    if (memcmp(p, kMagic, sizeof(kMagic)) != 0) {
        error = "bytes that do not start with the frame magic 'LWP1'; skipped to the next frame";
        pos_++;
        resync_ = true;
        return read_status::bad_magic;
    }
    const uint32_t n_header = get_u32le(p + 4);
    const uint64_t n_body   = get_u64le(p + 8);
    if (n_header == 0 || n_header > kMaxHeader || n_body > max_body_) {
        error = "frame header length " + std::to_string(n_header) + " or body length " + std::to_string(n_body) +
                " is over the limit (header 1.." + std::to_string(kMaxHeader) + ", body <= " + std::to_string(max_body_) + ")";
        pos_ += sizeof(kMagic);
        resync_ = true;
        return read_status::too_large;
    }
    if (!fill(16 + (size_t) n_header + (size_t) n_body)) {
        error = "stream ended inside a frame of " + std::to_string(16 + n_header + n_body) + " bytes";
        pos_ = buf_.size();
        return read_status::truncated;
    }
    p = buf_.data() + pos_;
    out.header.assign((const char *) p + 16, n_header);
    out.body.assign(p + 16 + n_header, p + 16 + n_header + n_body);
    pos_ += 16 + (size_t) n_header + (size_t) n_body;
    return read_status::ok;
}

bool write_frame(int fd, const std::string & header, const void * body, uint64_t body_size) {
    uint8_t prefix[kPrefix];
    memcpy(prefix, kMagic, sizeof(kMagic));
    put_u32le(prefix + 4, (uint32_t) header.size());
    put_u64le(prefix + 8, body_size);
    // one system call for the whole frame where the pipe takes it: a reader waiting for the frame wakes once,
    // not once per part
    struct iovec iov[3] = {
        { prefix, sizeof(prefix) },
        { (void *) header.data(), header.size() },
        { (void *) body, (size_t) body_size },
    };
    int n_iov = body_size == 0 ? 2 : 3;
    struct iovec * v = iov;
    while (n_iov > 0) {
        const ssize_t w = ::writev(fd, v, n_iov);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            return false;
        }
        // skip what was written: whole parts, then into the part it stopped in
        size_t done = (size_t) w;
        while (n_iov > 0 && done >= v->iov_len) {
            done -= v->iov_len;
            ++v;
            --n_iov;
        }
        if (n_iov > 0) {
            v->iov_base = (uint8_t *) v->iov_base + done;
            v->iov_len -= done;
        }
    }
    return true;
}

using json = nlohmann::ordered_json;

read_status message_reader::read(frame & out, std::string & error) {
    for (;;) {
        frame f;
        const read_status st = frames_.read(f, error);
        if (st != read_status::ok) {
            count_ = 0;
            body_.clear();
            return st;
        }
        json hdr = json::parse(f.header, nullptr, /*allow_exceptions =*/ false);
        if (!hdr.is_object() || !hdr.contains("fragment")) {
            if (count_ != 0) {
                error = "a message arrived while fragment " + std::to_string(body_.size()) + " of message " + id_ + " was expected";
                count_ = 0;
                body_.clear();
                out = std::move(f);
                return read_status::bad_fragment;
            }
            out = std::move(f);
            return read_status::ok;
        }
        const json & fr = hdr["fragment"];
        const std::string id = hdr.contains("id") ? hdr["id"].dump() : "null";
        auto bad = [&](const std::string & msg) {
            error = "fragment of message " + id + ": " + msg;
            count_ = 0;
            body_.clear();
            hdr.erase("fragment");
            out.header = hdr.dump();
            out.body.clear();
            return read_status::bad_fragment;
        };
        if (!fr.is_object() || !fr.contains("index") || !fr.contains("count") || !fr.contains("offset") || !fr.contains("total") ||
            !fr["index"].is_number_unsigned() || !fr["count"].is_number_unsigned() ||
            !fr["offset"].is_number_unsigned() || !fr["total"].is_number_unsigned()) {
            return bad("needs unsigned index, count, offset and total");
        }
        const uint64_t index  = fr["index"].get<uint64_t>();
        const uint64_t count  = fr["count"].get<uint64_t>();
        const uint64_t offset = fr["offset"].get<uint64_t>();
        const uint64_t total  = fr["total"].get<uint64_t>();
        if (index >= count) {
            return bad("index " + std::to_string(index) + " is not below count " + std::to_string(count));
        }
        if (total > max_message_) {
            return bad("total " + std::to_string(total) + " bytes is over the limit of " + std::to_string(max_message_));
        }
        if (count_ == 0) {
            if (index != 0) {
                return bad("starts at fragment " + std::to_string(index) + ", fragment 0 is missing (gap)");
            }
            if (count < 1) {
                return bad("count must be at least 1");
            }
            id_    = id;
            count_ = count;
            total_ = total;
            body_.clear();
            body_.reserve(total);
        } else if (id != id_) {
            return bad("interleaves with message " + id_);
        } else if (count != count_ || total != total_) {
            return bad("count or total changed within the message");
        }
        const uint64_t received = body_.size();
        if (offset < received) {
            return bad("offset " + std::to_string(offset) + " overlaps the " + std::to_string(received) + " bytes received (overlap or duplicate)");
        }
        if (offset > received) {
            return bad("offset " + std::to_string(offset) + " leaves a gap after the " + std::to_string(received) + " bytes received");
        }
        if (offset + f.body.size() > total_) {
            return bad("runs past the total of " + std::to_string(total_) + " bytes");
        }
        body_.insert(body_.end(), f.body.begin(), f.body.end());
        if (index + 1 < count_) {
            if (body_.size() == total_) {
                return bad("the total was reached before the last fragment");
            }
            continue;
        }
        if (body_.size() != total_) {
            return bad("the last fragment ends at " + std::to_string(body_.size()) + " of " + std::to_string(total_) + " bytes (gap)");
        }
        hdr.erase("fragment");
        out.header = hdr.dump();
        out.body   = std::move(body_);
        body_.clear();
        count_ = 0;
        return read_status::ok;
    }
}

bool write_message(int fd, const std::string & header, const std::vector<uint8_t> & body, uint64_t max_body,
                   uint64_t * written) {
    auto frame = [&](const std::string & h, const uint8_t * data, uint64_t size) {
        if (!write_frame(fd, h, data, size)) {
            return false;
        }
        if (written) {
            *written += kPrefix + h.size() + size;
        }
        return true;
    };
    if (body.size() <= max_body) {
        return frame(header, body.data(), body.size());
    }
    json hdr = json::parse(header);
    const uint64_t total = body.size();
    const uint64_t count = (total + max_body - 1) / max_body;
    for (uint64_t i = 0; i < count; ++i) {
        const uint64_t offset = i*max_body;
        const uint64_t size   = std::min<uint64_t>(max_body, total - offset);
        json h = i + 1 < count ? json{ {"id", hdr.contains("id") ? hdr["id"] : json(nullptr)} } : hdr;
        h["fragment"] = { {"index", i}, {"count", count}, {"offset", offset}, {"total", total} };
        if (!frame(h.dump(), body.data() + offset, size)) {
            return false;
        }
    }
    return true;
}

} // namespace lw
