// libFuzzer harness for the decoders of the worker: the frame and message reader (with fragments) and the
// bundle decoder. Every input must be decoded or refused with an error; a crash, a hang, a leak or undefined
// behaviour is a finding. Built by `dgr bench --fuzz` with clang (-fsanitize=fuzzer,address,undefined).

#include "bundle.h"
#include "frame.h"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    // the whole input as a bundle
    try {
        lw::bundle b = lw::bundle_decode(data, size, 1u << 20);
        (void) lw::bundle_encode(b);
    } catch (const std::runtime_error &) {
    }

    // the whole input as a stream of frames: small limits so that fragments and refusals are reached
    lw::message_reader reader(lw::frame_reader(data, size, 64), 4096);
    for (int i = 0; i < 64; ++i) {
        lw::frame msg;
        std::string error;
        const lw::read_status st = reader.read(msg, error);
        if (st == lw::read_status::eof || st == lw::read_status::truncated || st == lw::read_status::io_error) {
            break;
        }
        if (st == lw::read_status::ok) {
            try {
                (void) lw::bundle_decode(msg.body.data(), msg.body.size(), 1u << 20);
            } catch (const std::runtime_error &) {
            }
        }
    }
    return 0;
}
