#include "ops.h"

#include "bundle.h"

#include "llama.h"
#include "llama-cpp.h"
#include "llama-ext.h"
#include "held.h"
// the tensors a model holds and the buffers it allocated, read from the loaded model (internal, as upstream's tests do)
#include "llama-model.h"
#include "llama-kv-cache.h"
#include "llama-kv-cache-iswa.h"
#include "ggml-backend.h"
#include "ggml-cpp.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace lw {

static constexpr int kProtocolVersion = 1;

// a saved session state: this magic, the identity of the model (16 hex digits), the layers it holds
// ("[000010,000020)"), the sequence state of llama.cpp
static const std::string kStateMagic = "LWS1";

// errors logged by llama.cpp during the current request
static std::string g_llama_errors;
static bool        g_verbose = false;

static void log_callback(ggml_log_level level, const char * text, void * /*user_data*/) {
    if (level == GGML_LOG_LEVEL_ERROR) {
        g_llama_errors += text;
    }
    if (g_verbose || level == GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

static std::string llama_errors(const std::string & fallback) {
    std::string s = g_llama_errors;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) {
        s.pop_back();
    }
    return s.empty() ? fallback : s;
}

reply reply::ok(const json & id, json fields) {
    reply r;
    r.header = json::object();
    r.header["id"] = id;
    r.header["ok"] = true;
    for (auto & [k, v] : fields.items()) {
        r.header[k] = v;
    }
    return r;
}

reply reply::fail(const json & id, const std::string & code, const std::string & message, json fields) {
    reply r;
    r.header = json::object();
    r.header["id"] = id;
    r.header["ok"] = false;
    r.header["error"] = { {"code", code}, {"message", message} };
    for (auto & [k, v] : fields.items()) {
        r.header[k] = v;
    }
    return r;
}

// memory of this process from /proc/self/status, in bytes
static json process_memory() {
    json out = { {"rss", 0}, {"peak_rss", 0} };
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line)) {
        long long kb = 0;
        if (sscanf(line.c_str(), "VmRSS: %lld kB", &kb) == 1) {
            out["rss"] = kb * 1024;
        } else if (sscanf(line.c_str(), "VmHWM: %lld kB", &kb) == 1) {
            out["peak_rss"] = kb * 1024;
        }
    }
    return out;
}

template <typename T>
static T get_field(const json & req, const char * key, const T & def) {
    if (!req.contains(key)) {
        return def;
    }
    try {
        return req.at(key).get<T>();
    } catch (const std::exception &) {
        throw request_error{"bad_request", std::string("field '") + key + "' has the wrong type"};
    }
}

template <typename T>
static T need_field(const json & req, const char * key) {
    if (!req.contains(key)) {
        throw request_error{"bad_request", std::string("the request needs the field '") + key + "'"};
    }
    return get_field<T>(req, key, T{});
}

worker::worker(bool verbose, uint64_t max_body, int next_fd) : max_body_(max_body), next_fd_(next_fd) {
    g_verbose = verbose;
    llama_log_set(log_callback, nullptr);
    llama_backend_init();
}

worker::~worker() {
    unload();
    llama_backend_free();
}

void worker::unload() {
    if (ctx_) {
        llama_free(ctx_);
        ctx_ = nullptr;
    }
    if (model_) {
        llama_model_free(model_);
        model_ = nullptr;
    }
    model_path_.clear();
    sessions_.clear();
    free_seqs_.clear();
    layer_inps_.clear();
}

void worker::require_context() const {
    if (!ctx_) {
        throw request_error{"no_context", "no model with a context is loaded: send 'load' first"};
    }
}

static double us_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

reply worker::handle(const frame & req) {
    handle_start_ = std::chrono::steady_clock::now();
    json hdr;
    try {
        hdr = json::parse(req.header);
    } catch (const std::exception & e) {
        return reply::fail(nullptr, "bad_request", std::string("header is not valid JSON: ") + e.what());
    }
    if (!hdr.is_object()) {
        return reply::fail(nullptr, "bad_request", "header is not a JSON object");
    }
    const json id = hdr.contains("id") ? hdr["id"] : json(nullptr);
    if (!hdr.contains("op") || !hdr["op"].is_string()) {
        return reply::fail(id, "bad_request", "header has no string field 'op'");
    }
    const std::string op = hdr["op"];
    g_llama_errors.clear();
    last_was_decode_ = false;
    try {
        reply r;
        if (op == "hello") {
            r = reply::ok(id, op_hello());
        } else if (op == "load") {
            r = reply::ok(id, op_load(hdr));
        } else if (op == "ownership") {
            r = reply::ok(id, ownership());
        } else if (op == "memory") {
            r = reply::ok(id, op_memory());
        } else if (op == "sessions") {
            r = reply::ok(id, op_sessions());
        } else if (op == "decode" || op == "decode_batch") {
            const int32_t hops = forward_hops(hdr);
            r = reply::ok(id);
            json fields = op == "decode" ? op_decode(hdr, req.body, r.body) : op_decode_batch(hdr, req.body, r.body);
            for (auto & [k, v] : fields.items()) {
                r.header[k] = v;
            }
            forward_reply(hdr, hops, r);
        } else if (op == "truncate") {
            r = reply::ok(id, op_truncate(hdr));
        } else if (op == "release") {
            r = reply::ok(id, op_release(hdr));
        } else if (op == "state_save") {
            r = reply::ok(id);
            json fields = op_state_save(hdr, r.body);
            for (auto & [k, v] : fields.items()) {
                r.header[k] = v;
            }
        } else if (op == "state_load") {
            r = reply::ok(id, op_state_load(hdr, req.body));
        } else if (op == "timing") {
            r = reply::ok(id, op_timing());
        } else if (op == "tokenize") {
            r = reply::ok(id, op_tokenize(hdr));
        } else if (op == "detokenize") {
            r = reply::ok(id, op_detokenize(hdr));
        } else if (op == "shutdown") {
            exit_ = true;
            r = reply::ok(id);
        } else {
            return reply::fail(id, "unknown_op", "unknown op '" + op + "'");
        }
        return r;
    } catch (const request_error & e) {
        return reply::fail(id, e.code, e.message, e.fields);
    } catch (const std::exception & e) {
        return reply::fail(id, "internal", e.what());
    }
}

json worker::op_hello() {
    return {
        {"protocol", kProtocolVersion},
        {"max_body", max_body_},
        {"features", {
            {"layer_range", (bool) WORKER_HAS_LAYER_RANGE},
            {"boundary",    (bool) WORKER_HAS_LAYER_RANGE},
            {"kv_recipe",   (bool) WORKER_HAS_KV_RANGE},
        }},
        {"system_info", llama_print_system_info()},
    };
}

// the identity of a model that bundles carry: a hash of its metadata (FNV-1a over the sorted keys and values), but
// the keys of the files it is stored in (split.*: upstream's split files; part.*: the parts of `dgr parts`), so that a
// range loaded from its part files and one loaded from the whole file are ranges of one model
static std::string model_identity(const llama_model * model) {
    std::vector<std::string> entries;
    std::vector<char>        buf(1 << 16);
    for (int32_t i = 0; i < llama_model_meta_count(model); ++i) {
        std::string entry;
        for (const bool key : { true, false }) {
            const int32_t n = key ? llama_model_meta_key_by_index(model, i, buf.data(), buf.size())
                                  : llama_model_meta_val_str_by_index(model, i, buf.data(), buf.size());
            entry.append(buf.data(), n < 0 ? 0 : std::min<size_t>((size_t) n, buf.size() - 1));
            entry.push_back(key ? '=' : '\n');
        }
        if (entry.rfind("split.", 0) == 0 || entry.rfind("part.", 0) == 0) {
            continue;
        }
        entries.push_back(entry);
    }
    std::sort(entries.begin(), entries.end());
    uint64_t h = 0xcbf29ce484222325ull;
    for (const std::string & e : entries) {
        for (unsigned char c : e) {
            h = (h ^ c) * 0x100000001b3ull;
        }
    }
    char out[32];
    snprintf(out, sizeof(out), "%016" PRIx64, h);
    return out;
}

json worker::op_load(const json & req) {
    const std::string path = need_field<std::string>(req, "model");
    // without the range fields the model parameters stay llama_model_default_params()'s
    const bool    ranged      = req.contains("layer_begin") || req.contains("layer_end");
    const int32_t layer_begin = get_field<int32_t>(req, "layer_begin", 0);
    const int32_t layer_end   = get_field<int32_t>(req, "layer_end", -1);
    const bool    use_mmap    = get_field<bool>(req, "mmap", true);
    // the layers to offload to the GPU devices, counted from the end of the range (llama.cpp's default when absent)
    const bool    offload      = req.contains("n_gpu_layers");
    const int32_t n_gpu_layers = get_field<int32_t>(req, "n_gpu_layers", -1);
    const bool    with_ctx    = get_field<bool>(req, "context", false);
    // the layers whose input every decode extracts, for requests that ask for it (a reference for a range)
    const std::vector<int32_t> layer_inps = get_field<std::vector<int32_t>>(req, "layer_inp", {});
    if (!layer_inps.empty() && !with_ctx) {
        throw request_error{"bad_request", "layer_inp needs a context"};
    }

    // every field is checked before the loaded model is dropped
    const uint32_t    max_sessions = get_field<uint32_t>(req, "max_sessions", 4);
    const int32_t     n_threads    = get_field<int32_t>(req, "n_threads", 2);
    const uint32_t    n_ctx        = get_field<uint32_t>(req, "n_ctx", 1024);
    const uint32_t    n_batch      = get_field<uint32_t>(req, "n_batch", 512);
    const uint32_t    n_ubatch     = get_field<uint32_t>(req, "n_ubatch", 512);
    const std::string type_k       = get_field<std::string>(req, "type_k", "f16");
    if (max_sessions < 1 || max_sessions > 64) {
        throw request_error{"bad_request", "max_sessions must be in [1, 64]"};
    }
    if (n_threads < 1) {
        throw request_error{"bad_request", "n_threads must be at least 1"};
    }
    if (n_ctx < max_sessions || n_batch < 1 || n_ubatch < 1) {
        throw request_error{"bad_request", "n_ctx must be at least max_sessions, n_batch and n_ubatch at least 1"};
    }
    if (type_k != "f16" && type_k != "f32" && type_k != "q8_0") {
        throw request_error{"bad_request", "type_k must be f16, f32 or q8_0"};
    }

    unload();

    llama_model_params mparams = llama_model_default_params();
    if (req.contains("mmap")) {
        mparams.load_mode = use_mmap ? LLAMA_LOAD_MODE_MMAP : LLAMA_LOAD_MODE_NONE;
    }
    if (offload) {
        mparams.n_gpu_layers = n_gpu_layers;
    }
#if WORKER_HAS_LAYER_RANGE
    if (ranged) {
        mparams.layer_begin = layer_begin;
        mparams.layer_end   = layer_end == -1 ? 0 : layer_end;  // llama.cpp's "to the last layer" is 0
    }
#else
    (void) ranged;
#endif

    model_ = llama_model_load_from_file(path.c_str(), mparams);
    if (!model_) {
        throw request_error{"load_failed", llama_errors("failed to load " + path)};
    }
    model_path_ = path;
    n_layer_    = llama_model_n_layer(model_);
#if !WORKER_HAS_LAYER_RANGE
    if (layer_begin != 0 || (layer_end != -1 && layer_end != n_layer_)) {
        unload();
        throw request_error{"unsupported", "this llama.cpp build has no layer range support (baseline build): "
                            "only the whole model [0, " + std::to_string(n_layer_) + ") loads"};
    }
#endif
    n_embd_     = llama_model_n_embd(model_);
    n_vocab_    = llama_vocab_n_tokens(llama_model_get_vocab(model_));
    held_       = read_held_range(model_);
    identity_ = model_identity(model_);

    if (with_ctx) {
        max_sessions_ = max_sessions;
        llama_context_params cparams = llama_context_default_params();
        cparams.n_ctx           = n_ctx;
        cparams.n_batch         = n_batch;
        cparams.n_ubatch        = n_ubatch;
        cparams.n_seq_max       = max_sessions_;
        // every session has its own cache stream of n_ctx/max_sessions cells: its results do not depend on the
        // other sessions (a shared stream changes the attention layout, and with it the last bits of the logits)
        cparams.kv_unified      = false;
        cparams.n_threads       = n_threads;
        cparams.n_threads_batch = n_threads;
        cparams.no_perf         = true;
        cparams.type_k = type_k == "f32" ? GGML_TYPE_F32 : type_k == "q8_0" ? GGML_TYPE_Q8_0 : GGML_TYPE_F16;
        ctx_ = llama_init_from_model(model_, cparams);
        if (!ctx_) {
            const std::string err = llama_errors("failed to create a context");
            unload();
            throw request_error{"context_failed", err};
        }
        for (const int32_t il : layer_inps) {
            // inside the range, after its first layer: this worker computes that layer's input
            if (!(held_.begin < il && il < held_.end)) {
                const std::string range = "[" + std::to_string(held_.begin) + ", " + std::to_string(held_.end) + ")";
                unload();
                throw request_error{"bad_request", "layer_inp " + std::to_string(il) + " is not a layer after the "
                                    "first of " + range + ", the layers this worker holds"};
            }
            llama_set_embeddings_layer_inp(ctx_, il, true);
        }
        layer_inps_ = layer_inps;
        n_ctx_   = llama_n_ctx(ctx_);
        n_batch_ = llama_n_batch(ctx_);
        for (int32_t s = (int32_t) max_sessions_ - 1; s >= 0; --s) {
            free_seqs_.push_back(s);
        }
    }

    json out = ownership();
    out["memory"] = op_memory();
    // true when the model was loaded with llama_model_default_params() as they are
    out["default_params"] = !ranged && !req.contains("mmap") && !offload;
    return out;
}

json worker::ownership() const {
    if (!model_) {
        throw request_error{"no_model", "no model is loaded: send 'load' first"};
    }
    json out = json::object();
    out["model"]       = model_path_;
    out["identity"]    = identity_;
    out["n_layer"]     = n_layer_;
    out["n_embd"]      = n_embd_;
    out["n_vocab"]     = n_vocab_;
    out["layer_begin"] = held_.begin;
    out["layer_end"]   = held_.end;
    // read from the tensors the model holds: its layers, the input and the output tensors with data
    out["partial"]         = held_.begin > 0 || held_.end < n_layer_;
    out["has_tok_embd"]    = held_.tok_embd;
    out["has_output_norm"] = held_.output_norm;
    out["has_output"]      = held_.output;

    // the tensors the loaded model holds
    json tensors = json::array();
    uint64_t n_bytes = 0;
    for (const auto & [name, t] : llama_internal_get_tensor_map(model_)) {
        tensors.push_back({ name, ggml_nbytes(t) });
        n_bytes += ggml_nbytes(t);
    }
    out["n_tensors"]   = tensors.size();
    // where the weights are: the tensors in buffers of a device (not host memory), read from the buffers
    json     on_device    = json::array();
    uint64_t device_bytes = 0;
    for (const auto & [name, t] : llama_internal_get_tensor_map(model_)) {
        if (t->buffer != nullptr && !ggml_backend_buffer_is_host(t->buffer)) {
            on_device.push_back(name);
            device_bytes += ggml_nbytes(t);
        }
    }
    out["device_tensors"] = on_device;
    out["device_bytes"]   = device_bytes;
    out["device_buffer_size"] = device_buffer_size();
    // the device the model assigned each layer of the range to, and the output layer's
    json layer_devices        = json::array();
    for (int32_t il = held_.begin; il < held_.end; ++il) {
        layer_devices.push_back(ggml_backend_dev_name(model_->dev_layer(il)));
    }
    out["layer_devices"] = layer_devices;
    out["output_device"] = held_.output ? json(ggml_backend_dev_name(model_->dev_output())) : json(nullptr);
    out["host_kept"]     = host_kept();
    if (ctx_) {
        out["kv_layers"] = kv_layers();
    }
    out["n_bytes"]     = n_bytes;
    out["model_size"]  = llama_model_size(model_);
    out["n_params"]    = llama_model_n_params(model_);
    out["buffer_size"] = model_buffer_size();
    out["buffers"]     = model_buffers();
    out["tensors"]     = tensors;
    if (ctx_) {
        out["n_ctx"]        = n_ctx_;
        out["n_batch"]      = n_batch_;
        out["max_sessions"] = max_sessions_;
    }
    return out;
}

// bytes of the backend buffers that hold the weights (with mmap, a buffer spans the file from its first to its last tensor)
uint64_t worker::model_buffer_size() const {
    uint64_t size = 0;
    if (model_) {
        for (const auto & [_, n] : model_->memory_breakdown()) {
            size += n;
        }
    }
    return size;
}

// the weight buffers by buffer type: its name, its bytes and the tensors in its buffers (with mmap, the
// CPU_Mapped buffer is the span of the file from the first to the last of its tensors)
json worker::model_buffers() const {
    json out = json::array();
    if (!model_) {
        return out;
    }
    for (const auto & [buft, n] : model_->memory_breakdown()) {
        json names = json::array();
        for (const auto & [name, t] : llama_internal_get_tensor_map(model_)) {
            if (t->buffer != nullptr && ggml_backend_buffer_get_type(t->buffer) == buft) {
                names.push_back(name);
            }
        }
        out.push_back({ {"type", ggml_backend_buft_name(buft)}, {"bytes", n}, {"tensors", names} });
    }
    return out;
}

// bytes of the weight buffers that are not in host memory (those of the GPU devices)
uint64_t worker::device_buffer_size() const {
    uint64_t size = 0;
    if (model_) {
        for (const auto & [buft, n] : model_->memory_breakdown()) {
            size += ggml_backend_buft_is_host(buft) ? 0 : n;
        }
    }
    return size;
}

// whether `dev` can run the op that uses the weight `w` with it in a buffer of the device: the test llama.cpp
// makes when it selects a weight's buffer type (a product for a matrix, a multiplication for a vector)
static bool device_supports_weight(ggml_backend_dev_t dev, const ggml_tensor * w) {
    ggml_init_params params = { ggml_tensor_overhead() * 4, nullptr, true };
    ggml_context_ptr ctx_ptr{ ggml_init(params) };
    ggml_context *   ctx = ctx_ptr.get();
    ggml_tensor *    cw  = ggml_new_tensor(ctx, w->type, GGML_MAX_DIMS, w->ne);
    ggml_tensor *    op  = nullptr;
    if (ggml_n_dims(w) >= 2) {
        op = ggml_mul_mat(ctx, cw, ggml_new_tensor_4d(ctx, GGML_TYPE_F32, w->ne[0], 512, w->ne[2], w->ne[3]));
    } else {
        op = ggml_mul(ctx, ggml_new_tensor_4d(ctx, GGML_TYPE_F32, w->ne[0], w->ne[1], w->ne[2], w->ne[3]), cw);
    }
    cw->buffer    = ggml_backend_buft_alloc_buffer(ggml_backend_dev_buffer_type(dev), 0);
    const bool ok = ggml_backend_dev_supports_op(dev, op);
    ggml_backend_buffer_free(cw->buffer);
    cw->buffer = nullptr;
    return ok;
}

// the tensors of layers assigned to a GPU device that llama.cpp's buffer-type selection kept in host memory,
// and whether that device supports the op of each (when it does not, host memory is llama.cpp's fallback)
json worker::host_kept() const {
    json          out     = json::array();
    const int32_t n_layer = llama_model_n_layer(model_);
    for (const auto & [name, t] : llama_internal_get_tensor_map(model_)) {
        if (t->buffer == nullptr || !ggml_backend_buffer_is_host(t->buffer)) {
            continue;
        }
        int                il  = -1;
        ggml_backend_dev_t dev = nullptr;
        if (std::sscanf(name.c_str(), "blk.%d.", &il) == 1 && il >= 0 && il < n_layer) {
            dev = model_->dev_layer(il);
        } else if (t == model_->output || t == model_->output_norm || name.rfind("output", 0) == 0) {
            dev = model_->dev_output();
        }
        if (dev == nullptr || ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU) {
            continue;
        }
        out.push_back({
            { "name", name },
            { "bytes", ggml_nbytes(t) },
            { "device", ggml_backend_dev_name(dev) },
            { "device_supports", device_supports_weight(dev, t) }
        });
    }
    return out;
}

// the layers of the KV cache of the context: for each, where its K tensor is and its bytes
json worker::kv_layers() const {
    json out = json::array();
    std::vector<const llama_kv_cache *> caches;
    llama_memory_t mem = llama_get_memory(ctx_);
    if (const auto * kv = dynamic_cast<const llama_kv_cache *>(mem)) {
        caches.push_back(kv);
    } else if (const auto * iswa = dynamic_cast<const llama_kv_cache_iswa *>(mem)) {
        caches.push_back(iswa->get_base());
        caches.push_back(iswa->get_swa());
    }
    for (const llama_kv_cache * kv : caches) {
        for (uint32_t il : kv->get_layer_ids()) {
            const ggml_tensor * k = kv->get_k_storage((int32_t) il);
            const bool on_device = k->buffer != nullptr && !ggml_backend_buffer_is_host(k->buffer);
            out.push_back({ {"layer", il}, {"on_device", on_device}, {"k_bytes", ggml_nbytes(k)} });
        }
    }
    return out;
}

json worker::op_memory() {
    json out = process_memory();
    out["model_buffer_size"] = model_buffer_size();
    uint64_t kv = 0, compute = 0;
    if (ctx_) {
        for (const auto & [_, mb] : llama_get_memory_breakdown(ctx_)) {
            kv      += mb.context;
            compute += mb.compute;
        }
    }
    out["kv_bytes"]      = kv;
    out["compute_bytes"] = compute;
    uint64_t kv_device = 0;
    if (ctx_) {
        for (const auto & [buft, mb] : llama_get_memory_breakdown(ctx_)) {
            kv_device += ggml_backend_buft_is_host(buft) ? 0 : mb.context;
        }
    }
    out["kv_device_bytes"] = kv_device;
    return out;
}

json worker::op_sessions() {
    require_context();
    json list = json::array();
    for (const auto & [id, s] : sessions_) {
        list.push_back({ {"session", id}, {"epoch", s.epoch}, {"n_pos", s.n_pos}, {"seq", s.seq} });
    }
    int32_t n_cells = 0;
    for (const auto & [_, s] : sessions_) {
        n_cells += s.n_pos;
    }
    return { {"sessions", list}, {"max_sessions", max_sessions_}, {"n_ctx", n_ctx_}, {"cells_used", n_cells} };
}

session & worker::find_session(const std::string & id, uint64_t epoch) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
        throw request_error{"cache_miss", "session '" + id + "' is not cached here (unknown, released or evicted): "
                            "send its tokens again from position 0", { {"session", id} }};
    }
    session & s = it->second;
    if (epoch < s.epoch) {
        throw request_error{"stale_epoch", "session '" + id + "' is at epoch " + std::to_string(s.epoch) +
                            ", the request carries the older epoch " + std::to_string(epoch),
                            { {"session", id}, {"epoch", s.epoch} }};
    }
    if (epoch > s.epoch) {
        throw request_error{"cache_miss", "session '" + id + "' is cached for epoch " + std::to_string(s.epoch) +
                            ", not " + std::to_string(epoch) + ": send its tokens again from position 0",
                            { {"session", id}, {"epoch", s.epoch} }};
    }
    return s;
}

void worker::drop_session(const std::string & id) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
        return;
    }
    llama_memory_seq_rm(llama_get_memory(ctx_), it->second.seq, -1, -1);
    free_seqs_.push_back(it->second.seq);
    sessions_.erase(it);
}

bool worker::evict_lru(const std::string & keep, std::vector<std::string> & evicted) {
    const std::string * lru = nullptr;
    uint64_t oldest = UINT64_MAX;
    for (const auto & [id, s] : sessions_) {
        if (id != keep && s.last_used < oldest) {
            oldest = s.last_used;
            lru = &id;
        }
    }
    if (!lru) {
        return false;
    }
    const std::string victim = *lru;
    drop_session(victim);
    evicted.push_back(victim);
    return true;
}

session & worker::open_session(const std::string & id, uint64_t epoch, std::vector<std::string> & evicted) {
    auto it = sessions_.find(id);
    if (it != sessions_.end()) {
        if (epoch < it->second.epoch) {
            throw request_error{"stale_epoch", "session '" + id + "' is at epoch " + std::to_string(it->second.epoch) +
                                ", the request carries the older epoch " + std::to_string(epoch),
                                { {"session", id}, {"epoch", it->second.epoch} }};
        }
        // a new prefill of a known session: start over
        llama_memory_seq_rm(llama_get_memory(ctx_), it->second.seq, -1, -1);
        it->second.epoch = epoch;
        it->second.n_pos = 0;
        return it->second;
    }
    if (sessions_.size() >= max_sessions_) {
        evict_lru(id, evicted);
    }
    GGML_ASSERT(!free_seqs_.empty());
    session s;
    s.seq   = free_seqs_.back();
    s.epoch = epoch;
    free_seqs_.pop_back();
    return sessions_[id] = s;
}

bool decode_request::wants_logits(int32_t i) const {
    return logits == "all" || ((logits == "last" || logits == "argmax") && i == n_tokens - 1);
}

decode_request worker::parse_fields(const json & req) const {
    decode_request r;
    r.session  = need_field<std::string>(req, "session");
    r.epoch    = need_field<uint64_t>(req, "epoch");
    r.pos      = need_field<int32_t>(req, "pos");
    r.n_tokens = need_field<int32_t>(req, "n_tokens");
    r.logits   = get_field<std::string>(req, "logits", "last");

    if (r.n_tokens < 1 || (uint32_t) r.n_tokens > n_batch_) {
        throw request_error{"bad_request", "n_tokens must be in [1, " + std::to_string(n_batch_) + "]"};
    }
    if (r.pos < 0) {
        throw request_error{"bad_request", "pos must not be negative"};
    }
    if (r.logits != "none" && r.logits != "last" && r.logits != "all" && r.logits != "argmax") {
        throw request_error{"bad_request", "logits must be none, last, all or argmax"};
    }
    return r;
}

void worker::parse_tokens(const json & req, decode_request & r) const {
    r.tokens = get_field<std::vector<llama_token>>(req, "tokens", {});
    if ((int32_t) r.tokens.size() != r.n_tokens) {
        throw request_error{"bad_request", "tokens has " + std::to_string(r.tokens.size()) + " entries, n_tokens is " +
                            std::to_string(r.n_tokens)};
    }
    for (llama_token t : r.tokens) {
        if (t < 0 || t >= n_vocab_) {
            throw request_error{"bad_request", "token " + std::to_string(t) + " is outside the vocabulary [0, " +
                                std::to_string(n_vocab_) + ")"};
        }
    }
}

std::vector<float> worker::parse_bundle(const std::vector<uint8_t> & body,
                                        const std::vector<std::pair<std::string, std::string>> & want,
                                        int32_t n_rows) const {
    if (!WORKER_HAS_LAYER_RANGE) {
        throw request_error{"unsupported", "this llama.cpp build does not evaluate a range of layers"};
    }
    bundle b;
    try {
        b = bundle_decode(body.data(), body.size(), kMaxMessage);
    } catch (const std::exception & e) {
        throw request_error{"bad_bundle", e.what()};
    }
    for (const auto & [key, value] : want) {
        const auto it = b.meta.find(key);
        const std::string got = it == b.meta.end() ? "(missing)" : it->second;
        if (got != value) {
            throw request_error{"bundle_mismatch", "bundle " + key + " is '" + got + "', this worker expects '" + value + "'"};
        }
    }
    const auto it = b.tensors.find("residual");
    if (b.tensors.size() != 1 || it == b.tensors.end()) {
        throw request_error{"bundle_mismatch", "the bundle must hold exactly the tensor 'residual'"};
    }
    const bundle_tensor & t = it->second;
    if (t.dtype != "F32" || t.shape.size() != 2 || t.shape[0] != n_rows || t.shape[1] != n_embd_) {
        throw request_error{"bundle_mismatch", "tensor 'residual' must be F32 [" + std::to_string(n_rows) + ", " +
                            std::to_string(n_embd_) + "]"};
    }
    std::vector<float> hidden(t.size / sizeof(float));
    memcpy(hidden.data(), t.data, t.size); // the tensor need not be aligned in the bundle
    return hidden;
}

std::string worker::wrong_input(bool tokens) const {
    const std::string range = "[" + std::to_string(held_.begin) + ", " + std::to_string(held_.end) + ")";
    return tokens ? "this worker holds the layers " + range + " and takes a bundle of the hidden state, not tokens" :
                    "this worker holds the layers " + range + " and takes tokens, not a bundle";
}

decode_request worker::parse_decode(const json & req, const std::vector<uint8_t> & body) const {
    decode_request r = parse_fields(req);
    // the reply is the hidden state that enters a layer inside the range instead: the split's reference
    r.layer_inp = get_field<int32_t>(req, "layer_inp", -1);
    if (req.contains("layer_inp") && std::find(layer_inps_.begin(), layer_inps_.end(), r.layer_inp) == layer_inps_.end()) {
        throw request_error{"bad_request", "layer_inp " + std::to_string(r.layer_inp) + " is not a layer_inp of the load"};
    }
    if (r.layer_inp >= 0 && r.logits != "none") {
        throw request_error{"bad_request", "a request with layer_inp replies with a hidden state: logits must be none"};
    }
    // the input: tokens for the first range, a bundle from the previous range otherwise
    if (held_.begin == 0) {
        if (!body.empty()) {
            throw request_error{"wrong_input", wrong_input(false)};
        }
        parse_tokens(req, r);
        return r;
    }
    if (req.contains("tokens")) {
        throw request_error{"wrong_input", wrong_input(true)};
    }
    r.hidden = parse_bundle(body, {
        {"model", identity_}, {"n_layer", std::to_string(n_layer_)}, {"layer_end", std::to_string(held_.begin)},
        {"session", r.session}, {"epoch", std::to_string(r.epoch)}, {"pos", std::to_string(r.pos)},
        {"n_tokens", std::to_string(r.n_tokens)},
    }, r.n_tokens);
    return r;
}

session & worker::acquire_session(const decode_request & r, std::vector<std::string> & evicted) {
    // everything that can refuse the request is checked before a session is opened, evicted or changed
    const uint32_t n_cells = n_ctx_ / max_sessions_;
    if ((uint32_t) (r.pos + r.n_tokens) > n_cells) {
        throw request_error{"no_capacity", "session '" + r.session + "' would need " + std::to_string(r.pos + r.n_tokens) +
                            " cells, a session has " + std::to_string(n_cells) + " (n_ctx / max_sessions)"};
    }
    if (r.pos == 0) {
        return open_session(r.session, r.epoch, evicted);
    }
    session & s = find_session(r.session, r.epoch);
    if (r.pos != s.n_pos) {
        throw request_error{"bad_position", "session '" + r.session + "' has " + std::to_string(s.n_pos) +
                            " positions cached; the request starts at " + std::to_string(r.pos) +
                            " (truncate first to go back)", { {"n_pos", s.n_pos} }};
    }
    return s;
}

void worker::add_to_batch(llama_batch_ext * batch, const session & s, const decode_request & r,
                          const std::vector<float> & hidden, size_t row) const {
    for (int32_t i = 0; i < r.n_tokens; ++i, ++row) {
        // a range without the input layer takes the hidden state that enters its first layer as embeddings
        const int32_t idx = held_.begin == 0 ?
            llama_batch_ext_add_token(batch, s.seq, r.tokens[i]) :
            llama_batch_ext_add_embd(batch, s.seq, { hidden.data() + row*n_embd_, 1, (size_t) n_embd_ });
        if (idx < 0) {
            throw request_error{"decode_failed", "the batch refused entry " + std::to_string(row) + " (" + std::to_string(idx) + ")"};
        }
        const llama_pos pos = r.pos + i;
        llama_batch_ext_set_pos(batch, idx, &pos);
        llama_batch_ext_set_output_logits(batch, idx, r.wants_logits(i));
    }
}

worker::processed worker::process(llama_batch_ext * batch, const std::vector<const decode_request *> & rs,
                                  const json & extra) {
    const int32_t n_reused = llama_perf_context(ctx_).n_reused;
    const auto    t0       = std::chrono::steady_clock::now();
    const int32_t ret      = llama_process(ctx_, LLAMA_PROCESS_TYPE_DECODE, batch);
    const double  us       = us_since(t0);
    if (ret != 0) {
        // nothing of the failed batch stays cached
        for (const decode_request * r : rs) {
            llama_memory_seq_rm(llama_get_memory(ctx_), sessions_.at(r->session).seq, r->pos, -1);
        }
        throw request_error{"decode_failed", llama_errors("llama_decode failed with " + std::to_string(ret)), extra};
    }
    return { us, llama_perf_context(ctx_).n_reused > n_reused };
}

void worker::encode_hidden(int32_t il, int64_t n_rows, std::map<std::string, std::string> meta,
                           std::vector<uint8_t> & out) const {
    const float * data = llama_get_embeddings_layer_inp(ctx_, il);
    if (!data) {
        throw request_error{"decode_failed", llama_errors("no hidden state after layer " + std::to_string(il - 1))};
    }
    bundle b;
    b.meta = std::move(meta);
    b.meta.insert({
        {"model", identity_}, {"n_layer", std::to_string(n_layer_)},
        {"layer_begin", std::to_string(held_.begin)}, {"layer_end", std::to_string(il)},
    });
    bundle_tensor & t = b.tensors["residual"];
    t.dtype = "F32";
    t.shape = { n_rows, n_embd_ };
    t.data  = (const uint8_t *) data;
    t.size  = (size_t) n_rows*n_embd_*sizeof(float);
    out = bundle_encode(b);
}

json worker::decode_output(const decode_request & r, std::vector<uint8_t> & out) {
    json res = json::object();
    if (r.layer_inp >= 0 || held_.end < n_layer_) {
        // a range without the output layer outputs the hidden state that enters the layer where it ends
        encode_hidden(r.layer_inp >= 0 ? r.layer_inp : held_.end, r.n_tokens, {
            {"session", r.session}, {"epoch", std::to_string(r.epoch)}, {"pos", std::to_string(r.pos)},
            {"n_tokens", std::to_string(r.n_tokens)},
        }, out);
        return res;
    }

    // logits of the requested tokens, and their argmax
    json argmax = json::array();
    for (int32_t i = 0; i < r.n_tokens; ++i) {
        if (!r.wants_logits(i)) {
            continue;
        }
        const float * l = llama_get_logits_ith(ctx_, i);
        if (!l) {
            throw request_error{"decode_failed", llama_errors("no logits")};
        }
        argmax.push_back(std::max_element(l, l + n_vocab_) - l);
        if (r.logits == "argmax") {
            continue; // the argmax only: the logits stay here
        }
        const uint8_t * p = (const uint8_t *) l;
        out.insert(out.end(), p, p + (size_t) n_vocab_*sizeof(float));
    }
    res["argmax"]  = argmax;
    res["n_vocab"] = n_vocab_;
    return res;
}

json worker::op_decode(const json & req, const std::vector<uint8_t> & body, std::vector<uint8_t> & out) {
    require_context();
    const decode_request r = parse_decode(req, body);
    const double parse_us = us_since(handle_start_); // the header's JSON too

    std::vector<std::string> evicted;
    session & s = acquire_session(r, evicted);
    s.last_used = ++tick_;

    llama_batch_ext_ptr batch(llama_batch_ext_init(ctx_));
    add_to_batch(batch.get(), s, r, r.hidden, 0);
    const processed p = process(batch.get(), { &r }, { {"evicted", evicted} });
    s.n_pos = r.pos + r.n_tokens;

    const auto t0 = std::chrono::steady_clock::now();
    json res = decode_output(r, out);
    add_timing(parse_us, p.us, us_since(t0), p.reused);
    res["session"] = r.session;
    res["epoch"]   = r.epoch;
    res["n_pos"]   = s.n_pos;
    res["evicted"] = evicted;
    return res;
}

int32_t worker::forward_hops(const json & req) const {
    const int32_t hops = get_field<int32_t>(req, "forward", 0);
    if (req.contains("trail") && !req["trail"].is_array()) {
        throw request_error{"bad_request", "trail must be an array"};
    }
    if (hops < 0) {
        throw request_error{"bad_request", "forward must not be negative"};
    }
    if (hops == 0) {
        return 0;
    }
    require_context();
    if (held_.end == n_layer_) {
        throw request_error{"bad_request", "forward: this worker holds the last layer, there is no next range"};
    }
    if (next_fd_ < 0) {
        throw request_error{"bad_request", "forward needs a next range: this worker was started without --next-fd"};
    }
    if (req.contains("layer_inp")) {
        throw request_error{"bad_request", "a request with layer_inp replies to its sender: it cannot forward"};
    }
    return hops;
}

void worker::forward_reply(const json & req, int32_t hops, reply & r) const {
    // each range that forwards adds its reply's fields to the trail; the range that replies returns it
    json trail = req.contains("trail") ? req["trail"] : json::array();
    if (hops == 0) {
        if (!trail.empty()) {
            r.header["trail"] = trail;
        }
        return;
    }
    json own = r.header;
    own.erase("id");
    own.erase("ok");
    trail.push_back(own);
    // the same request without the tokens, which only the first range takes: the body is the hidden state
    json next = req;
    next.erase("tokens");
    if (next.contains("steps")) {
        for (json & step : next["steps"]) {
            step.erase("tokens");
        }
    }
    next["forward"] = hops - 1;
    next["trail"]   = trail;
    r.header  = next;
    r.forward = true;
}

void worker::add_timing(double parse_us, double process_us, double output_us, bool reused) {
    timing_.n_requests++;
    timing_.graphs_reused += reused ? 1 : 0;
    timing_.wait_us    += wait_us_;
    timing_.read_us    += read_us_;
    timing_.parse_us   += parse_us;
    timing_.process_us += process_us;
    timing_.output_us  += output_us;
    last_was_decode_ = true;
}

// decode_batch: one step of each of several cached sessions in one batch of llama.cpp (docs/protocol.md)
json worker::op_decode_batch(const json & req, const std::vector<uint8_t> & body, std::vector<uint8_t> & out) {
    require_context();
    const std::string logits = get_field<std::string>(req, "logits", "argmax");
    if (logits != "last" && logits != "argmax") {
        throw request_error{"bad_request", "logits of decode_batch must be last or argmax"};
    }
    if (!req.contains("steps") || !req["steps"].is_array() || req["steps"].empty()) {
        throw request_error{"bad_request", "steps must be a non-empty array of {session, epoch, pos, n_tokens}"};
    }
    // every step is checked before a session changes: the request is applied whole or not at all
    std::vector<decode_request> rs;
    json     key     = json::array(); // what the bundles of the batch carry: [[session, epoch, pos, n_tokens]...]
    uint32_t n_total = 0;
    for (const json & step : req["steps"]) {
        if (!step.is_object()) {
            throw request_error{"bad_request", "each step must be an object"};
        }
        json fields = step;
        fields["logits"] = logits;
        decode_request r = parse_fields(fields);
        if (held_.begin == 0) {
            parse_tokens(step, r);
        } else if (step.contains("tokens")) {
            throw request_error{"wrong_input", wrong_input(true)};
        }
        for (const decode_request & other : rs) {
            if (other.session == r.session) {
                throw request_error{"bad_request", "session '" + r.session + "' has more than one step"};
            }
        }
        const uint32_t n_cells = n_ctx_ / max_sessions_;
        const session & s = find_session(r.session, r.epoch);
        if (r.pos != s.n_pos) {
            throw request_error{"bad_position", "session '" + r.session + "' has " + std::to_string(s.n_pos) +
                                " positions cached; its step starts at " + std::to_string(r.pos),
                                { {"session", r.session}, {"n_pos", s.n_pos} }};
        }
        if ((uint32_t) (r.pos + r.n_tokens) > n_cells) {
            throw request_error{"no_capacity", "session '" + r.session + "' would need " +
                                std::to_string(r.pos + r.n_tokens) + " cells, a session has " + std::to_string(n_cells)};
        }
        n_total += r.n_tokens;
        key.push_back({ r.session, r.epoch, r.pos, r.n_tokens });
        rs.push_back(std::move(r));
    }
    if (n_total > n_batch_) {
        throw request_error{"bad_request", "the steps have " + std::to_string(n_total) + " tokens, n_batch is " +
                            std::to_string(n_batch_)};
    }
    const std::string steps = key.dump();
    std::vector<float> hidden;
    if (held_.begin == 0 && !body.empty()) {
        throw request_error{"wrong_input", wrong_input(false)};
    }
    if (held_.begin > 0) {
        hidden = parse_bundle(body, {
            {"model", identity_}, {"n_layer", std::to_string(n_layer_)}, {"layer_end", std::to_string(held_.begin)},
            {"steps", steps},
        }, (int32_t) n_total);
    }
    const double parse_us = us_since(handle_start_);

    llama_batch_ext_ptr batch(llama_batch_ext_init(ctx_));
    std::vector<const decode_request *> added;
    size_t row = 0;
    for (const decode_request & r : rs) {
        add_to_batch(batch.get(), sessions_.at(r.session), r, hidden, row);
        row += r.n_tokens;
        added.push_back(&r);
    }
    const processed p = process(batch.get(), added, json::object());

    const auto t0 = std::chrono::steady_clock::now();
    json results = json::array();
    for (const decode_request & r : rs) {
        session & s = sessions_.at(r.session);
        s.n_pos     = r.pos + r.n_tokens;
        s.last_used = ++tick_;
        results.push_back({ {"session", r.session}, {"n_pos", s.n_pos} });
    }
    json res = { {"results", results} };
    if (held_.end < n_layer_) {
        encode_hidden(held_.end, (int64_t) n_total, { {"steps", steps} }, out);
    } else {
        json argmax = json::array();
        row = 0;
        for (const decode_request & r : rs) {
            row += r.n_tokens;
            const float * l = llama_get_logits_ith(ctx_, (int32_t) row - 1);
            if (!l) {
                throw request_error{"decode_failed", llama_errors("no logits")};
            }
            argmax.push_back(std::max_element(l, l + n_vocab_) - l);
            if (logits == "last") {
                out.insert(out.end(), (const uint8_t *) l, (const uint8_t *) (l + n_vocab_));
            }
        }
        res["argmax"]  = argmax;
        res["n_vocab"] = n_vocab_;
    }
    add_timing(parse_us, p.us, us_since(t0), p.reused);
    return res;
}

void worker::add_reply_write(double write_us, uint64_t forwarded) {
    if (last_was_decode_) {
        timing_.write_us += write_us;
        timing_.forwarded_bytes += forwarded;
    }
}

json worker::op_timing() {
    const decode_timing t = timing_;
    timing_ = {};
    return {
        {"n_requests", t.n_requests}, {"graphs_reused", t.graphs_reused},
        {"wait_us", t.wait_us}, {"read_us", t.read_us}, {"parse_us", t.parse_us},
        {"process_us", t.process_us}, {"output_us", t.output_us}, {"write_us", t.write_us},
        {"forwarded_bytes", t.forwarded_bytes},
    };
}

json worker::op_truncate(const json & req) {
    require_context();
    const std::string sid    = need_field<std::string>(req, "session");
    const uint64_t    epoch  = need_field<uint64_t>(req, "epoch");
    const int32_t     n_keep = need_field<int32_t>(req, "n_keep");
    session & s = find_session(sid, epoch);
    if (n_keep < 0 || n_keep > s.n_pos) {
        throw request_error{"bad_request", "n_keep must be in [0, " + std::to_string(s.n_pos) + "]"};
    }
    if (!llama_memory_seq_rm(llama_get_memory(ctx_), s.seq, n_keep, -1)) {
        throw request_error{"truncate_failed", llama_errors("the cache could not drop the positions")};
    }
    s.n_pos     = n_keep;
    s.last_used = ++tick_;
    return { {"session", sid}, {"n_pos", s.n_pos} };
}

json worker::op_release(const json & req) {
    require_context();
    const std::string sid = need_field<std::string>(req, "session");
    const bool known = sessions_.count(sid) > 0;
    drop_session(sid);
    return { {"session", sid}, {"released", known} };
}

// the owner of a saved state: the model and its layers, which llama.cpp's state does not record (only their count)
static std::string state_owner(const std::string & identity, const held_range & held) {
    char range[32];
    snprintf(range, sizeof(range), "[%06d,%06d)", (int) held.begin, (int) held.end);
    return identity + range;
}

json worker::op_state_save(const json & req, std::vector<uint8_t> & out) {
    require_context();
    const std::string sid   = need_field<std::string>(req, "session");
    const uint64_t    epoch = need_field<uint64_t>(req, "epoch");
    const session & s = find_session(sid, epoch);
    // the state of llama.cpp after a header with the identity of the model and its layers, see docs/protocol.md
    const std::string header = kStateMagic + state_owner(identity_, held_);
    out.assign(header.begin(), header.end());
    const size_t n = llama_state_seq_get_size(ctx_, s.seq);
    out.resize(header.size() + n);
    if (llama_state_seq_get_data(ctx_, out.data() + header.size(), n, s.seq) != n) {
        throw request_error{"state_failed", llama_errors("the state could not be saved")};
    }
    return { {"session", sid}, {"epoch", epoch}, {"n_pos", s.n_pos} };
}


json worker::op_state_load(const json & req, const std::vector<uint8_t> & body) {
    require_context();
    const std::string sid   = need_field<std::string>(req, "session");
    const uint64_t    epoch = need_field<uint64_t>(req, "epoch");
    const std::string owner  = state_owner(identity_, held_);
    const std::string header = kStateMagic + owner;
    if (body.size() < header.size() || memcmp(body.data(), kStateMagic.data(), kStateMagic.size()) != 0) {
        throw request_error{"bad_request", "the body is not a state saved by state_save"};
    }
    const std::string saved(body.begin() + kStateMagic.size(), body.begin() + header.size());
    if (saved != owner) {
        throw request_error{"incompatible_recipe", "the state was saved for the model and layers " + saved +
                            ", this worker holds " + owner};
    }
    std::vector<std::string> evicted;
    session & s = open_session(sid, epoch, evicted);
    if (llama_state_seq_set_data(ctx_, body.data() + header.size(), body.size() - header.size(), s.seq) == 0) {
        // llama.cpp refuses a state saved under another cache recipe: another K/V type or model shape
        drop_session(sid);
        throw request_error{"incompatible_recipe", llama_errors("the state was refused"), { {"evicted", evicted} }};
    }
    s.n_pos     = llama_memory_seq_pos_max(llama_get_memory(ctx_), s.seq) + 1;
    s.last_used = ++tick_;
    return { {"session", sid}, {"epoch", epoch}, {"n_pos", s.n_pos}, {"evicted", evicted} };
}

json worker::op_tokenize(const json & req) {
    if (!model_) {
        throw request_error{"no_model", "no model is loaded: send 'load' first"};
    }
    std::string text = need_field<std::string>(req, "text");
    const bool chat = get_field<bool>(req, "chat", false);
    if (chat) {
        const char * tmpl = llama_model_chat_template(model_, nullptr);
        if (!tmpl) {
            throw request_error{"bad_request", "the model has no chat template"};
        }
        llama_chat_message msg = { "user", text.c_str() };
        std::vector<char> buf(text.size()*2 + 1024);
        int32_t n = llama_chat_apply_template(tmpl, &msg, 1, true, buf.data(), (int32_t) buf.size());
        if (n > (int32_t) buf.size()) {
            buf.resize(n);
            n = llama_chat_apply_template(tmpl, &msg, 1, true, buf.data(), (int32_t) buf.size());
        }
        if (n < 0) {
            throw request_error{"bad_request", "the chat template could not be applied"};
        }
        text.assign(buf.data(), n);
    }
    const llama_vocab * vocab = llama_model_get_vocab(model_);
    std::vector<llama_token> tokens(text.size() + 8);
    int32_t n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), tokens.data(), (int32_t) tokens.size(), !chat, chat);
    if (n < 0) {
        tokens.resize(-n);
        n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), tokens.data(), (int32_t) tokens.size(), !chat, chat);
    }
    tokens.resize(std::max(n, 0));
    return { {"tokens", tokens}, {"eos", llama_vocab_eos(vocab)}, {"eot", llama_vocab_eot(vocab)} };
}

json worker::op_detokenize(const json & req) {
    if (!model_) {
        throw request_error{"no_model", "no model is loaded: send 'load' first"};
    }
    const std::vector<llama_token> tokens = need_field<std::vector<llama_token>>(req, "tokens");
    const llama_vocab * vocab = llama_model_get_vocab(model_);
    for (llama_token t : tokens) {
        if (t < 0 || t >= n_vocab_) {
            throw request_error{"bad_request", "token " + std::to_string(t) + " is outside the vocabulary"};
        }
    }
    std::string text(tokens.size()*16 + 16, '\0');
    int32_t n = llama_detokenize(vocab, tokens.data(), (int32_t) tokens.size(), text.data(), (int32_t) text.size(), false, false);
    if (n < 0) {
        text.resize(-n);
        n = llama_detokenize(vocab, tokens.data(), (int32_t) tokens.size(), text.data(), (int32_t) text.size(), false, false);
    }
    text.resize(std::max(n, 0));
    return { {"text", text} };
}

} // namespace lw
