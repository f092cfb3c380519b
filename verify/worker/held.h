#pragma once
// What a loaded model holds, read from the model itself (its tensors), never from what the load asked for.

#include "llama.h"
#include "llama-model.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>

struct held_range {
    int32_t begin = 0;  // the layers [begin, end) whose blk.<il>.* tensors the model holds
    int32_t end   = 0;
    bool tok_embd    = false;  // the input: token embeddings with data
    bool output_norm = false;  // the output: final norm and head with data
    bool output      = false;
};

inline held_range read_held_range(const llama_model * model) {
    const int32_t n_layer = llama_model_n_layer(model);
    int32_t lo = INT32_MAX;
    int32_t hi = -1;
    for (const auto & [name, t] : llama_internal_get_tensor_map(model)) {
        int il = -1;
        // blk.<il> with il >= n_layer are the next-token prediction layers, which come with the output
        if (std::sscanf(name.c_str(), "blk.%d.", &il) == 1 && il >= 0 && il < n_layer) {
            lo = std::min(lo, (int32_t) il);
            hi = std::max(hi, (int32_t) il);
        }
    }
    held_range r;
    r.begin       = hi < 0 ? 0 : lo;
    r.end         = hi < 0 ? 0 : hi + 1;
    r.tok_embd    = model->tok_embd != nullptr && model->tok_embd->buffer != nullptr;
    r.output_norm = model->output_norm != nullptr && model->output_norm->buffer != nullptr;
    r.output      = model->output != nullptr && model->output->buffer != nullptr;
    return r;
}
