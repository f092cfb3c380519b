// layer-worker: one process that loads one layer range of a model and serves requests over the framed
// protocol of docs/protocol.md on stdin/stdout. Logs go to stderr.
//
// Built against the patched llama.cpp by `dgr build`; against an unpatched llama.cpp (the baseline build)
// the requests that need the patches are answered with the error code "unsupported".

#include "frame.h"
#include "ops.h"

#include <fcntl.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

static void usage(const char * argv0) {
    fprintf(stderr,
        "usage: %s [--max-body BYTES] [--next-fd FD] [--verbose]\n"
        "  serves the layer worker protocol (docs/protocol.md) on stdin/stdout\n"
        "  --max-body  largest frame body in both directions; larger messages are sent as fragments (default 64 MiB)\n"
        "  --next-fd   an open file descriptor: the input of the worker of the next range, where a decode request\n"
        "              with `forward` goes on instead of a reply\n",
        argv0);
}

int main(int argc, char ** argv) {
    uint64_t max_body = 64ull << 20;
    bool verbose = false;
    int  next_fd = -1;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--max-body") == 0 && i + 1 < argc) {
            max_body = strtoull(argv[++i], nullptr, 10);
        } else if (strcmp(argv[i], "--next-fd") == 0 && i + 1 < argc) {
            char * end = nullptr;
            const long fd = strtol(argv[++i], &end, 10);
            if (*end != '\0' || fd < 3 || fd > INT_MAX || fcntl((int) fd, F_GETFD) == -1) {
                fprintf(stderr, "layer-worker: --next-fd %s is not an open file descriptor above 2\n", argv[i]);
                return 2;
            }
            next_fd = (int) fd;
        } else if (strcmp(argv[i], "--verbose") == 0) {
            verbose = true;
        } else {
            usage(argv[0]);
            return 2;
        }
    }
    if (max_body < 1024) {
        fprintf(stderr, "layer-worker: --max-body must be at least 1024\n");
        return 2;
    }
    // a supervisor that goes away must not kill the worker mid-write: write() reports it instead
    signal(SIGPIPE, SIG_IGN);

    lw::worker w(verbose, max_body, next_fd);
    lw::message_reader reader(lw::frame_reader(0, max_body), lw::kMaxMessage);

    // a header as one line of JSON; invalid UTF-8 in a string (an error message) is replaced, not thrown
    auto dump = [](const lw::json & header) { return header.dump(-1, ' ', false, lw::json::error_handler_t::replace); };
    using clock = std::chrono::steady_clock;
    auto us = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
    for (;;) {
        lw::frame req;
        std::string error;
        const clock::time_point t_idle = clock::now();
        reader.wait_readable();
        const clock::time_point t_first = clock::now();
        const lw::read_status st = reader.read(req, error);
        w.set_request_io(us(t_idle, t_first), us(t_first, clock::now()));
        if (st == lw::read_status::eof) {
            break;
        }
        lw::reply rep;
        switch (st) {
            case lw::read_status::ok:           rep = w.handle(req); break;
            case lw::read_status::too_large:    rep = lw::reply::fail(nullptr, "frame_too_large", error); break;
            case lw::read_status::bad_fragment: rep = lw::reply::fail(nullptr, "bad_fragment", error); break;
            default:                            rep = lw::reply::fail(nullptr, "bad_frame", error); break;
        }
        if (st == lw::read_status::bad_fragment) {
            // answer with the id of the message whose fragments were dropped
            const lw::json hdr = lw::json::parse(req.header, nullptr, false);
            if (hdr.is_object() && hdr.contains("id")) {
                rep.header["id"] = hdr["id"];
            }
        }
        const clock::time_point t_write = clock::now();
        uint64_t forwarded = 0;
        if (rep.forward && !lw::write_message(next_fd, dump(rep.header), rep.body, max_body, &forwarded)) {
            // the next range is gone: the sender hears it from this range
            rep = lw::reply::fail(rep.header["id"], "forward_failed", std::string("cannot write to the next range: ") + strerror(errno));
        }
        if (!rep.forward && !lw::write_message(1, dump(rep.header), rep.body, max_body)) {
            fprintf(stderr, "layer-worker: cannot write to stdout, exiting\n");
            return 1;
        }
        w.add_reply_write(us(t_write, clock::now()), forwarded);
        if (st == lw::read_status::truncated || st == lw::read_status::io_error || w.should_exit()) {
            break;
        }
    }
    return 0;
}
