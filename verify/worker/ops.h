// Request handling of the layer worker (docs/protocol.md).
#pragma once

#include "frame.h"
#include "held.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

struct llama_model;
struct llama_context;
struct llama_batch_ext;

namespace lw {

using json = nlohmann::ordered_json;

// the largest message (a body reassembled from fragments) a worker accepts
constexpr uint64_t kMaxMessage = 1ull << 30;

struct reply {
    json                 header;
    std::vector<uint8_t> body;
    bool                 forward = false; // header and body are the next range's request (the field `forward`)

    static reply ok(const json & id, json fields = json::object());
    static reply fail(const json & id, const std::string & code, const std::string & message, json fields = json::object());
};

// an error reported to the client with a stable code
struct request_error {
    std::string code;
    std::string message;
    json        fields = json::object();
};

// a decode request, validated: tokens for the first range, the hidden state of the previous range otherwise
struct decode_request {
    std::string              session;
    uint64_t                 epoch    = 0;
    int32_t                  pos      = 0;
    int32_t                  n_tokens = 0;
    std::string              logits; // none, last, all or argmax (the last one's argmax, no logits)
    std::vector<int32_t>     tokens;
    std::vector<float>       hidden; // [n_tokens, n_embd]
    int32_t                  layer_inp = -1; // >= 0: the reply is the hidden state that enters this layer

    bool wants_logits(int32_t i) const;
};

// where the time of the decode and decode_batch requests went since the last `timing` request, in microseconds
// (docs/protocol.md)
struct decode_timing {
    uint64_t n_requests      = 0;
    uint64_t graphs_reused   = 0; // requests whose llama_process reused the previous compute graph
    double   wait_us         = 0; // from the end of the previous reply to the first byte of the request
    double   read_us         = 0; // from that byte to the whole request
    double   parse_us        = 0; // the header's fields and the bundle, validated and copied
    double   process_us      = 0; // llama_process: the graph built or reused, and computed
    double   output_us       = 0; // the hidden state encoded as a bundle, or the logits copied
    double   write_us        = 0; // the reply written
    uint64_t forwarded_bytes = 0; // the frames sent on to the next range (`forward`)
};

// a session: a stable id mapped to a sequence of the context
struct session {
    int32_t  seq       = 0;
    uint64_t epoch     = 0;
    int32_t  n_pos     = 0; // positions cached: the next token is at n_pos
    uint64_t last_used = 0;
};

class worker {
public:
    // next_fd: where a request with `forward` goes on to the next range (-1: none)
    worker(bool verbose, uint64_t max_body, int next_fd = -1);
    ~worker();

    reply handle(const frame & req);
    bool  should_exit() const { return exit_; }

    // the wait and the read of the request that handle() gets next, and the write of the reply it returned
    void set_request_io(double wait_us, double read_us) { wait_us_ = wait_us; read_us_ = read_us; }
    // the reply of the last request written (or forwarded to the next range: `forwarded` bytes)
    void add_reply_write(double write_us, uint64_t forwarded);

private:
    void add_timing(double parse_us, double process_us, double output_us, bool reused);
    // the hops a decode request goes on for (`forward`), checked before anything changes
    int32_t forward_hops(const json & req) const;
    // the reply of a forwarded request turned into the request of the next range
    void    forward_reply(const json & req, int32_t hops, reply & r) const;
    json op_hello();
    json op_load(const json & req);
    json op_memory();
    json op_sessions();
    json op_decode(const json & req, const std::vector<uint8_t> & body, std::vector<uint8_t> & out);
    json op_decode_batch(const json & req, const std::vector<uint8_t> & body, std::vector<uint8_t> & out);
    decode_request parse_fields(const json & req) const;
    void           parse_tokens(const json & req, decode_request & r) const;
    // the residual of a bundle from the previous range, [n_rows, n_embd], after its metadata is checked
    std::vector<float> parse_bundle(const std::vector<uint8_t> & body,
                                    const std::vector<std::pair<std::string, std::string>> & want, int32_t n_rows) const;
    std::string    wrong_input(bool tokens) const;
    decode_request parse_decode(const json & req, const std::vector<uint8_t> & body) const;
    // the tokens of r (first range) or its rows of `hidden` from `row` on, in the sequence of s
    void add_to_batch(llama_batch_ext * batch, const session & s, const decode_request & r,
                      const std::vector<float> & hidden, size_t row) const;
    struct processed {
        double us;     // llama_process
        bool   reused; // the previous compute graph
    };
    // llama_process of the batch of rs; on failure their new positions are removed, and the request fails with extra
    processed process(llama_batch_ext * batch, const std::vector<const decode_request *> & rs, const json & extra);
    // the bundle of the hidden state that enters layer il, of the batch's n_rows tokens, with meta
    void encode_hidden(int32_t il, int64_t n_rows, std::map<std::string, std::string> meta,
                       std::vector<uint8_t> & out) const;
    json           decode_output(const decode_request & r, std::vector<uint8_t> & out);
    json op_truncate(const json & req);
    json op_release(const json & req);
    json op_state_save(const json & req, std::vector<uint8_t> & out);
    json op_state_load(const json & req, const std::vector<uint8_t> & body);
    json op_timing();
    json op_tokenize(const json & req);
    json op_detokenize(const json & req);

    json     ownership() const;
    uint64_t model_buffer_size() const;
    uint64_t device_buffer_size() const;
    json     kv_layers() const;
    json     host_kept() const;
    json     model_buffers() const;
    void unload();
    void require_context() const;

    // the session for a request: refuses unknown sessions (cache miss) and stale epochs
    session & find_session(const std::string & id, uint64_t epoch);
    // a new or reset session for a request at position 0; evicts the least recently used session when full
    session & open_session(const std::string & id, uint64_t epoch, std::vector<std::string> & evicted);
    // the session of a decode request, once the request is known to fit: opened at position 0, else continued
    session & acquire_session(const decode_request & r, std::vector<std::string> & evicted);
    bool evict_lru(const std::string & keep, std::vector<std::string> & evicted);
    void drop_session(const std::string & id);

    llama_model *   model_ = nullptr;
    llama_context * ctx_   = nullptr;
    std::string     model_path_;
    std::string     identity_; // 16 hex digits
    held_range      held_;     // what the loaded model holds, read from its tensors
    int32_t         n_layer_     = 0;
    int32_t         n_embd_      = 0;
    int32_t         n_vocab_     = 0;
    uint32_t        n_ctx_       = 0;
    uint32_t        n_batch_     = 0;
    uint32_t        max_sessions_ = 0;
    uint64_t        max_body_;
    int             next_fd_;

    std::map<std::string, session> sessions_;
    std::vector<int32_t>           free_seqs_;
    std::vector<int32_t>           layer_inps_; // the layers whose input every decode extracts (load's layer_inp)
    uint64_t                       tick_ = 0;

    decode_timing timing_;
    std::chrono::steady_clock::time_point handle_start_;
    double        wait_us_         = 0;
    double        read_us_         = 0;
    bool          last_was_decode_ = false;

    bool exit_ = false;
};

} // namespace lw
