// layer-graphs: the compute graph of every architecture llama.cpp's random-model generator can build, as JSON lines.
//
// Built against the patched tree and against the unpatched upstream tree (the baseline) alike: `dgr verify --only
// graph` runs both and compares the graphs (dgr.verify.graphs), to show that the series changes no graph when no
// layer range is set. The models are the ones of upstream's tests/test-llama-archs.cpp, made by its own functions
// (get_gguf_ctx, set_tensor_data, moe_implemented, moe_mandatory): the test source is included here, with its main
// renamed to a static function. Its other functions (the only callers of llama-common) are static and unused: each in
// its own section (-ffunction-sections), they are dropped by the linker (--gc-sections) at any optimization level, so
// the program links libllama and ggml only, like the worker (the baseline build has no libllama-common).
//
//   layer-graphs --list            one line per variant the generator is asked for: {"arch":..., "config":...}
//   layer-graphs [ARCH/CONFIG...]  the graphs of these variants (all of them by default), per variant first
//                                  {"arch":..., "config":..., "begin":true}, then one line per shape:
//                                  {"arch":..., "config":"dense"|"moe"|"nextn", "shape":"pp"|"pp-last"|"tg",
//                                   "n_tokens":..., "n_outputs":..., "gguf":"<fnv1a-64 of the GGUF metadata>",
//                                   "n_nodes":..., "ops":[...], "shapes":[...]} or, when the variant could not be
//                                  built, {..., "error":"..."}; last the sequence state after a prompt of 16 tokens:
//                                  {"arch":..., "config":..., "state":"<size>:<fnv1a-64 of its bytes>"} (or
//                                  "state_error":"...")
//
// The "nextn" variant of an architecture that has MTP layers is its first variant with one more layer, read as a nextn
// (MTP) layer: the trunk keeps its layers, and the graphs and the state must be upstream's too.
//
// A crash inside llama.cpp ends the process: the caller sees the variant that began and did not finish, and runs the
// remaining ones again.

// the headers of the test, included before `main` is renamed so that the macro touches the test's main only
#include "common.h"
#include "log.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#include "ggml-cpp.h"
#include "llama.h"
#include "llama-cpp.h"
#include "llama-ext.h"
#include "llama-arch.h"
#include "llama-model-saver.h"
#include "llama-model.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#define main static test_llama_archs_main
#include "tests/test-llama-archs.cpp"
#undef main

namespace {

const size_t   SEED  = 42;
const float    STDEV = 0.1f;

struct shape {
    const char * name;
    uint32_t     n_tokens;
    uint32_t     n_seqs;
    uint32_t     n_outputs;
};

// a prompt (one ubatch of 16 tokens, all of them output), the same with the last token output only (the rows of the
// outputs are selected before the last layer's end) and one generated token
const shape SHAPES[] = {
    { "pp",      16, 1, 16 },
    { "pp-last", 16, 1, 1  },
    { "tg",      1,  1, 1  },
};

std::string g_graphs_error;

void graphs_log(ggml_log_level level, const char * text, void * /*user_data*/) {
    // silent; the errors logged since a step began are the reason it failed ("error loading model: ...")
    if (level != GGML_LOG_LEVEL_ERROR || g_graphs_error.size() > 1000) {
        return;
    }
    std::string line = text;
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) {
        line.pop_back();
    }
    if (!line.empty()) {
        g_graphs_error += (g_graphs_error.empty() ? "" : "; ") + line;
    }
}

std::string json_str(const std::string & s) {
    std::string out = "\"";
    for (const unsigned char c : s) {
        switch (c) {
            case '"':  out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n";  break;
            case '\t': out += "\\t";  break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    snprintf(buf, sizeof(buf), "\\u%04x", c);
                    out += buf;
                } else {
                    out += (char) c;
                }
        }
    }
    return out + "\"";
}

uint64_t fnv1a(const uint8_t * data, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= data[i];
        h *= 1099511628211ull;
    }
    return h;
}

// the GGUF metadata the generator made (keys, values, tensor infos): the two trees build the same model
std::string gguf_fingerprint(const gguf_context * gguf) {
    std::vector<uint8_t> meta(gguf_get_meta_size(gguf));
    gguf_get_meta_data(gguf, meta.data());
    char buf[32];
    snprintf(buf, sizeof(buf), "%016" PRIx64, fnv1a(meta.data(), meta.size()));
    return buf;
}

const char * config_name(bool moe) {
    return moe ? "moe" : "dense";
}

struct variant {
    bool moe;
    bool nextn;
};

const char * config_name(const variant & v) {
    return v.nextn ? "nextn" : config_name(v.moe);
}

std::string variant_head(llm_arch arch, const variant & v) {
    return "{\"arch\":" + json_str(llm_arch_name(arch)) + ",\"config\":\"" + config_name(v) + "\"";
}

// the architectures whose graphs read nextn (MTP) layers (src/models/ files that use n_layer_nextn)
bool has_nextn(llm_arch arch) {
    switch (arch) {
        case LLM_ARCH_BAILINGMOE2:
        case LLM_ARCH_BAILINGMOE3:
        case LLM_ARCH_COHERE2MOE:
        case LLM_ARCH_DEEPSEEK2:
        case LLM_ARCH_DEEPSEEK32:
        case LLM_ARCH_DEEPSEEK4:
        case LLM_ARCH_DOTS3NOTE:
        case LLM_ARCH_EXAONE_MOE:
        case LLM_ARCH_EXAONE4:
        case LLM_ARCH_GEMMA4:
        case LLM_ARCH_GLM_DSA:
        case LLM_ARCH_GLM4_MOE:
        case LLM_ARCH_GLM4:
        case LLM_ARCH_GLM5_NEXT:
        case LLM_ARCH_HY_V3:
        case LLM_ARCH_MIMO2:
        case LLM_ARCH_NEMOTRON_H_MOE:
        case LLM_ARCH_NEMOTRON_H:
        case LLM_ARCH_OPENAI_MOE:
        case LLM_ARCH_QWEN35:
        case LLM_ARCH_QWEN35MOE:
        case LLM_ARCH_QWEN3NEXT:
        case LLM_ARCH_QWEN4EXP:
        case LLM_ARCH_STEP35:
            return true;
        default:
            return false;
    }
}

// the variants test_backends() of the test runs for an architecture: dense unless MoE is mandatory, MoE if implemented;
// then the first of them with a nextn layer, for an architecture that has them
std::vector<variant> variants_of(llm_arch arch) {
    std::vector<variant> out;
    for (bool moe : { false, true }) {
        if (moe && !moe_implemented(arch)) {
            continue;
        }
        if (!moe && moe_mandatory(arch)) {
            continue;
        }
        out.push_back({ moe, false });
    }
    if (has_nextn(arch) && !out.empty()) {
        out.push_back({ out.front().moe, true });
    }
    return out;
}

// the model of the generator with one more layer, the last one read as a nextn layer: every per-layer array (of
// block_count numbers) gets a copy of its last element (upstream's generator has no parameter for the layer count)
gguf_context_ptr get_gguf_ctx_nextn(llm_arch arch, bool moe) {
    const std::string prefix  = llm_arch_name(arch);
    gguf_context_ptr  gguf    = get_gguf_ctx(arch, moe);
    const uint32_t    n_layer = gguf_get_val_u32(gguf.get(), gguf_find_key(gguf.get(), (prefix + ".block_count").c_str()));
    for (int64_t i = 0; i < gguf_get_n_kv(gguf.get()); i++) {
        if (gguf_get_kv_type(gguf.get(), i) != GGUF_TYPE_ARRAY || gguf_get_arr_n(gguf.get(), i) != n_layer) {
            continue;
        }
        const gguf_type type = gguf_get_arr_type(gguf.get(), i);
        size_t          size = 0;
        switch (type) {
            case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: size = 1; break;
            case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: size = 2; break;
            case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: size = 4; break;
            case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: size = 8; break;
            default: continue;  // strings
        }
        std::vector<uint8_t> data((n_layer + 1) * size);
        memcpy(data.data(), gguf_get_arr_data(gguf.get(), i), n_layer * size);
        memcpy(data.data() + n_layer * size, data.data() + (n_layer - 1) * size, size);
        const std::string key = gguf_get_key(gguf.get(), i);
        gguf_set_arr_data(gguf.get(), key.c_str(), type, data.data(), n_layer + 1);
    }
    gguf_set_val_u32(gguf.get(), (prefix + ".block_count").c_str(), n_layer + 1);
    gguf_set_val_u32(gguf.get(), (prefix + ".nextn_predict_layers").c_str(), 1);
    return gguf;
}

std::string shape_head(const std::string & head, const shape & sh, const std::string & gguf) {
    return head + ",\"shape\":\"" + sh.name + "\",\"n_tokens\":" + std::to_string(sh.n_tokens) +
           ",\"n_outputs\":" + std::to_string(sh.n_outputs) + ",\"gguf\":\"" + gguf + "\"";
}

std::string graph_line(const std::string & head, const shape & sh, const std::string & gguf, ggml_cgraph * gf) {
    const int n_nodes = ggml_graph_n_nodes(gf);
    std::string ops    = "[";
    std::string shapes = "[";
    for (int i = 0; i < n_nodes; i++) {
        const ggml_tensor * t = ggml_graph_node(gf, i);
        char buf[128];
        snprintf(buf, sizeof(buf), "%s %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64, ggml_type_name(t->type),
                 t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
        ops += (i ? "," : "") + json_str(ggml_op_desc(t));
        shapes += (i ? "," : "") + json_str(buf);
    }
    return shape_head(head, sh, gguf) + ",\"n_nodes\":" + std::to_string(n_nodes) + ",\"ops\":" + ops +
           "],\"shapes\":" + shapes + "]}";
}

std::string error_line(const std::string & head, const shape & sh, const std::string & gguf, const std::string & error) {
    return shape_head(head, sh, gguf) + ",\"error\":" + json_str(error) + "}";
}

// the model and context of get_model_and_ctx() in the test, on the default devices, one thread; the nextn variant
// loads its MTP layer
std::pair<llama_model_ptr, llama_context_ptr> load(gguf_context * gguf, bool encode, bool load_mtp) {
    llama_model_params model_params = llama_model_default_params();
    model_params.progress_callback  = silent_model_load_progress;
    model_params.load_mtp           = load_mtp;

    llama_context_params ctx_params = llama_context_default_params();
    ctx_params.n_ctx                = 0;
    ctx_params.n_threads            = 1;
    ctx_params.n_threads_batch      = 1;
    if (!encode) {
        ctx_params.n_ubatch = 64;
    }

    tensor_data_params tensor_params = { SEED, STDEV };
    llama_model_ptr model(llama_model_init_from_user(gguf, set_tensor_data, &tensor_params, model_params));
    if (!model) {
        throw std::runtime_error("failed to create llama model: " + g_graphs_error);
    }
    llama_context_ptr lctx(llama_init_from_model(model.get(), ctx_params));
    if (!lctx) {
        throw std::runtime_error("failed to create llama context: " + g_graphs_error);
    }
    return std::make_pair(std::move(model), std::move(lctx));
}

// the size and the hash of the sequence state after a prompt of 16 tokens
std::string state_of(llama_context * lctx, uint32_t n_vocab) {
    std::vector<llama_token> tokens(16);
    for (size_t i = 0; i < tokens.size(); i++) {
        tokens[i] = (llama_token) ((i * 7 + 3) % n_vocab);
    }
    g_graphs_error.clear();
    if (llama_decode(lctx, llama_batch_get_one(tokens.data(), (int32_t) tokens.size())) != 0) {
        throw std::runtime_error("llama_decode failed: " + g_graphs_error);
    }
    std::vector<uint8_t> state(llama_state_seq_get_size(lctx, 0));
    if (llama_state_seq_get_data(lctx, state.data(), state.size(), 0) != state.size()) {
        throw std::runtime_error("llama_state_seq_get_data failed: " + g_graphs_error);
    }
    char buf[64];
    snprintf(buf, sizeof(buf), "%zu:%016" PRIx64, state.size(), fnv1a(state.data(), state.size()));
    return buf;
}

void run_variant(llm_arch arch, const variant & v) {
    const bool        moe  = v.moe;
    const std::string head = variant_head(arch, v);
    printf("%s,\"begin\":true}\n", head.c_str());
    fflush(stdout);

    // the encoder-decoder and diffusion models of the test keep the default ubatch (its `encode`)
    const bool encode = arch == LLM_ARCH_T5 || arch == LLM_ARCH_DREAM || arch == LLM_ARCH_LLADA ||
                        arch == LLM_ARCH_LLADA_MOE || arch == LLM_ARCH_RND1;

    std::string gguf_hash;
    std::vector<std::string> lines;
    try {
        g_graphs_error.clear();
        gguf_context_ptr gguf = v.nextn ? get_gguf_ctx_nextn(arch, moe) : get_gguf_ctx(arch, moe);
        if (arch == LLM_ARCH_BAILINGMOE3) {
            // as test_backends() does
            GGML_ASSERT(gguf_remove_key(gguf.get(), "bailingmoe3.kda.safe_gate") >= 0);
        }
        gguf_hash = gguf_fingerprint(gguf.get());
        auto model_and_ctx = load(gguf.get(), encode, v.nextn);
        for (const shape & sh : SHAPES) {
            g_graphs_error.clear();
            ggml_cgraph * gf = llama_graph_reserve(model_and_ctx.second.get(), sh.n_tokens, sh.n_seqs, sh.n_outputs);
            if (gf == nullptr) {
                lines.push_back(error_line(head, sh, gguf_hash, "llama_graph_reserve failed: " + g_graphs_error));
            } else {
                lines.push_back(graph_line(head, sh, gguf_hash, gf));
            }
        }
        // the encoder-decoder and diffusion models are not decoded from a prompt
        std::string state = "not decoded";
        if (!encode) {
            try {
                const llama_vocab * vocab = llama_model_get_vocab(model_and_ctx.first.get());
                state = state_of(model_and_ctx.second.get(), (uint32_t) llama_vocab_n_tokens(vocab));
            } catch (const std::exception & err) {
                lines.push_back(head + ",\"state_error\":" + json_str(err.what()) + "}");
                state.clear();
            }
        }
        if (!state.empty()) {
            lines.push_back(head + ",\"state\":" + json_str(state) + "}");
        }
    } catch (const std::exception & err) {
        lines.clear();
        for (const shape & sh : SHAPES) {
            lines.push_back(error_line(head, sh, gguf_hash, err.what()));
        }
        lines.push_back(head + ",\"state_error\":" + json_str(err.what()) + "}");
    }
    for (const std::string & line : lines) {
        printf("%s\n", line.c_str());
    }
    fflush(stdout);
}

}  // namespace

int main(int argc, char ** argv) {
    bool list = false;
    std::vector<std::string> only;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--list") == 0) {
            list = true;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [--list] [ARCH/CONFIG...]\n", argv[0]);
            return 2;
        } else {
            only.push_back(argv[i]);
        }
    }

    // an assertion in llama.cpp aborts with its message on stderr, without a debugger's backtrace on stdout
    setenv("GGML_NO_BACKTRACE", "1", 0);
    llama_log_set(graphs_log, nullptr);
    llama_backend_init();

    for (const llm_arch arch : llm_arch_all()) {
        if (arch == LLM_ARCH_UNKNOWN) {
            continue;
        }
        for (const variant & v : variants_of(arch)) {
            const std::string name = std::string(llm_arch_name(arch)) + "/" + config_name(v);
            if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) {
                continue;
            }
            if (list) {
                printf("%s}\n", variant_head(arch, v).c_str());
                continue;
            }
            run_variant(arch, v);
        }
    }
    fflush(stdout);
    llama_backend_free();
    return 0;
}
