// layer-bench: the cost of splitting a model into layer ranges inside one process, and the speed of the bundle
// codec. Prints one JSON object on stdout; `dgr bench` runs it next to the worker-process measurements.
//
//   layer-bench split --model PATH --split 0:10,10:20,20:30 [--threads 2] [--prefill 64,512] [--decode 32] [--reps 3]
//   layer-bench codec [--tokens 512] [--n-embd 576] [--reps 200]
//
// split: the whole model and the chain of partial models live in the same process; each measurement is taken for
// both in paired rounds, in alternating order (round r: whole then chain for even r, chain then whole for odd r),
// and the seconds of every round are printed (`whole_s`, `split_s`): dgr (dgr.verify.bench.paired) takes the
// ratio of each round, their median and spread. codec: likewise `codec_s` and `memcpy_s` per repetition.

#include "bundle.h"

#include "llama.h"
#include "llama-cpp.h"
#include "llama-ext.h"
#include "held.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

using json = nlohmann::ordered_json;

static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static void quiet_log(ggml_log_level level, const char * text, void * /*user_data*/) {
    if (level == GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

struct stage {
    llama_model *   model = nullptr;
    llama_context * ctx   = nullptr;
    bool head = false;
    bool tail = false;
    int32_t layer_end = 0;  // the end of the range the model holds
};

static stage load_stage(const std::string & path, int32_t begin, int32_t end, int n_threads, uint32_t n_ctx) {
    llama_model_params mp = llama_model_default_params();
    mp.layer_begin = begin;
    mp.layer_end   = end;
    stage s;
    s.model = llama_model_load_from_file(path.c_str(), mp);
    if (!s.model) {
        throw std::runtime_error("cannot load " + path);
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx           = n_ctx;
    cp.n_batch         = n_ctx;
    cp.n_ubatch        = 512;
    cp.n_threads       = n_threads;
    cp.n_threads_batch = n_threads;
    cp.no_perf         = true;
    s.ctx = llama_init_from_model(s.model, cp);
    if (!s.ctx) {
        throw std::runtime_error("cannot create a context");
    }
    const held_range held = read_held_range(s.model);
    s.head = held.begin == 0;
    s.tail = held.end == llama_model_n_layer(s.model);
    s.layer_end = held.end;
    return s;
}

// runs tokens at positions pos.. through the stages; returns the argmax of the last token
static int32_t run_chain(std::vector<stage> & stages, const std::vector<llama_token> & tokens, int32_t pos) {
    const int32_t n = (int32_t) tokens.size();
    std::vector<float> hidden;
    int32_t argmax = -1;
    for (auto & s : stages) {
        const int32_t n_embd = llama_model_n_embd(s.model);
        llama_batch_ext_ptr batch(llama_batch_ext_init(s.ctx));
        for (int32_t i = 0; i < n; ++i) {
            // the first range takes the tokens, the others the hidden state of the previous range
            const int32_t idx = s.head ? llama_batch_ext_add_token(batch.get(), 0, tokens[i])
                                       : llama_batch_ext_add_embd(batch.get(), 0, { hidden.data() + (size_t) i*n_embd, 1, (size_t) n_embd });
            const llama_pos p = pos + i;
            llama_batch_ext_set_pos(batch.get(), idx, &p);
            llama_batch_ext_set_output_logits(batch.get(), idx, i == n - 1);
        }
        if (llama_process(s.ctx, LLAMA_PROCESS_TYPE_DECODE, batch.get()) != 0) {
            throw std::runtime_error("decode failed");
        }
        if (s.tail) {
            const float * l = llama_get_logits_ith(s.ctx, n - 1);
            const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(s.model));
            argmax = (int32_t) (std::max_element(l, l + n_vocab) - l);
        } else {
            // the hidden state entering the layer where the range ends
            const float * data = llama_get_embeddings_layer_inp(s.ctx, s.layer_end);
            if (!data) {
                throw std::runtime_error("no hidden state");
            }
            hidden.assign(data, data + (size_t) n*n_embd);
        }
    }
    return argmax;
}

static void clear(std::vector<stage> & stages) {
    for (auto & s : stages) {
        llama_memory_clear(llama_get_memory(s.ctx), true);
    }
}

static std::vector<std::pair<int32_t, int32_t>> parse_split(const std::string & text) {
    std::vector<std::pair<int32_t, int32_t>> out;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = text.find(',', start);
        const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        int b = 0, e = 0;
        if (sscanf(part.c_str(), "%d:%d", &b, &e) != 2) {
            throw std::runtime_error("bad split part '" + part + "'");
        }
        out.emplace_back(b, e);
        if (comma == std::string::npos) {
            break;
        }
        start = comma + 1;
    }
    return out;
}

static std::vector<int32_t> parse_list(const std::string & text) {
    std::vector<int32_t> out;
    size_t start = 0;
    while (true) {
        const size_t comma = text.find(',', start);
        out.push_back(atoi(text.substr(start, comma - start).c_str()));
        if (comma == std::string::npos) {
            return out;
        }
        start = comma + 1;
    }
}

static json bench_split(const std::map<std::string, std::string> & args) {
    const std::string model   = args.at("--model");
    const auto        split   = parse_split(args.at("--split"));
    const int         threads = atoi(args.count("--threads") ? args.at("--threads").c_str() : "2");
    const auto        prefill = parse_list(args.count("--prefill") ? args.at("--prefill") : "64,512");
    const int         n_dec   = atoi(args.count("--decode") ? args.at("--decode").c_str() : "32");
    const int         reps    = atoi(args.count("--reps") ? args.at("--reps").c_str() : "3");
    const uint32_t    n_ctx   = 1024;

    std::vector<stage> whole = { load_stage(model, 0, 0, threads, n_ctx) };  // 0, 0: the whole model
    std::vector<stage> chain;
    for (const auto & [b, e] : split) {
        chain.push_back(load_stage(model, b, e, threads, n_ctx));
    }
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(whole[0].model));

    auto tokens_of = [&](int n) {
        std::vector<llama_token> t(n);
        for (int i = 0; i < n; ++i) {
            t[i] = 1 + (i * 7919) % (n_vocab - 1);
        }
        return t;
    };

    // `measure(stages, side)` for the whole model (side 0) and the chain (side 1) in paired rounds, in alternating
    // order (round r: the whole model first for even r), each from an empty cache: the seconds it returns, per side
    auto paired_rounds = [&](auto && measure) {
        std::vector<double> secs[2];
        for (int r = 0; r < reps; ++r) {
            for (int k = 0; k < 2; ++k) {
                const int w = r % 2 == 0 ? k : 1 - k;
                auto & st = w == 0 ? whole : chain;
                clear(st);
                secs[w].push_back(measure(st, w));
            }
        }
        return json{ {"whole_s", secs[0]}, {"split_s", secs[1]} };
    };

    json out = json::object();
    json prefill_out = json::array();
    for (int n : prefill) {
        const auto tokens = tokens_of(n);
        json row = paired_rounds([&](std::vector<stage> & st, int) {
            const double t0 = now_s();
            run_chain(st, tokens, 0);
            return now_s() - t0;
        });
        row["tokens"] = n;
        prefill_out.push_back(row);
    }
    out["prefill"] = prefill_out;

    // decode: n_dec single tokens after a 16-token prompt, the same greedy tokens for both
    const auto prompt = tokens_of(16);
    std::vector<int32_t> gen[2];
    json decode = paired_rounds([&](std::vector<stage> & st, int w) {
        int32_t tok = run_chain(st, prompt, 0);
        gen[w].assign(1, tok);
        const double t0 = now_s();
        for (int i = 0; i < n_dec; ++i) {
            tok = run_chain(st, { tok }, 16 + i);
            gen[w].push_back(tok);
        }
        return now_s() - t0;
    });
    decode["tokens"]      = n_dec;
    decode["same_tokens"] = gen[0] == gen[1];
    out["decode"] = decode;
    for (auto * st : { &whole, &chain }) {
        for (auto & s : *st) {
            llama_free(s.ctx);
            llama_model_free(s.model);
        }
    }
    out["split"] = args.at("--split");
    out["threads"] = threads;
    out["reps"] = reps;
    return out;
}

static json bench_codec(const std::map<std::string, std::string> & args) {
    const int n_tok  = atoi(args.count("--tokens") ? args.at("--tokens").c_str() : "512");
    const int n_embd = atoi(args.count("--n-embd") ? args.at("--n-embd").c_str() : "576");
    const int reps   = atoi(args.count("--reps") ? args.at("--reps").c_str() : "200");

    std::vector<float> residual((size_t) n_tok * n_embd);
    for (size_t i = 0; i < residual.size(); ++i) {
        residual[i] = (float) ((i * 2654435761u) % 1000) / 1000.0f;
    }
    const size_t bytes = residual.size() * sizeof(float);

    lw::bundle b;
    b.meta = { {"model", "0123456789abcdef"}, {"n_layer", "30"}, {"layer_begin", "0"}, {"layer_end", "10"},
               {"session", "bench"}, {"epoch", "1"}, {"pos", "0"}, {"n_tokens", std::to_string(n_tok)} };
    lw::bundle_tensor & t = b.tensors["residual"];
    t.dtype = "F32";
    t.shape = { n_tok, n_embd };
    t.data  = (const uint8_t *) residual.data();
    t.size  = bytes;

    std::vector<float> sink(residual.size());
    double best_encode = 1e30, best_decode = 1e30;
    std::vector<double> codec_s, memcpy_s;
    // what a hop does: encode at the producer, decode (validate, no copy) and copy out at the consumer
    auto hop = [&]() {
        const double t0 = now_s();
        const std::vector<uint8_t> data = lw::bundle_encode(b);
        const double t1 = now_s();
        const lw::bundle d = lw::bundle_decode(data.data(), data.size(), 1ull << 32);
        const double t2 = now_s();
        memcpy(sink.data(), d.tensors.at("residual").data, bytes);
        codec_s.push_back(now_s() - t0);
        best_encode = std::min(best_encode, t1 - t0);
        best_decode = std::min(best_decode, t2 - t1);
    };
    // the floor: the same bytes copied twice (into a message, out of it)
    auto copy_twice = [&]() {
        std::vector<uint8_t> copy(bytes);
        const double t0 = now_s();
        memcpy(copy.data(), residual.data(), bytes);
        memcpy(sink.data(), copy.data(), bytes);
        memcpy_s.push_back(now_s() - t0);
    };
    for (int r = 0; r < reps; ++r) {
        if (r % 2 == 0) { copy_twice(); hop(); } else { hop(); copy_twice(); }
    }
    const double gb = bytes / 1e9;
    return {
        {"bytes", bytes}, {"reps", reps},
        {"encode_gbps", gb / best_encode}, {"decode_gbps", gb / best_decode},
        {"codec_s", codec_s}, {"memcpy_s", memcpy_s},
    };
}

int main(int argc, char ** argv) {
    if (argc < 2 || (strcmp(argv[1], "split") != 0 && strcmp(argv[1], "codec") != 0)) {
        fprintf(stderr, "usage: %s split --model PATH --split A:B,B:C [--threads N] [--prefill N,N] [--decode N] [--reps N]\n"
                        "       %s codec [--tokens N] [--n-embd N] [--reps N]\n", argv[0], argv[0]);
        return 2;
    }
    std::map<std::string, std::string> args;
    for (int i = 2; i + 1 < argc; i += 2) {
        args[argv[i]] = argv[i + 1];
    }
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    try {
        const json out = strcmp(argv[1], "split") == 0 ? bench_split(args) : bench_codec(args);
        printf("%s\n", out.dump().c_str());
    } catch (const std::exception & e) {
        fprintf(stderr, "layer-bench: %s\n", e.what());
        return 1;
    }
    llama_backend_free();
    return 0;
}
