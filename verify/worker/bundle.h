// The boundary bundle (docs/bundle.md): safetensors layout, strict decoding.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lw {

// a tensor of a bundle: a view of bytes owned by the caller (encode) or by the decoded buffer (decode)
struct bundle_tensor {
    std::string          dtype; // F32, F16, BF16, I32
    std::vector<int64_t> shape;
    const uint8_t *      data = nullptr;
    size_t               size = 0;
};

struct bundle {
    std::map<std::string, std::string>   meta;    // __metadata__ without format/version/byte_order
    std::map<std::string, bundle_tensor> tensors;
};

constexpr uint64_t kBundleMaxHeader = 1u << 20;

// bytes of the bundle; the tensors are written in name order
std::vector<uint8_t> bundle_encode(const bundle & b);

// decodes and validates a bundle without copying its tensors: they point into data, which must outlive them;
// throws std::runtime_error naming the problem
bundle bundle_decode(const uint8_t * data, size_t size, uint64_t max_size);

} // namespace lw
