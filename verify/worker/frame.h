// Framing of the layer worker protocol (docs/protocol.md).
//
//   offset  size  field
//   0       4     magic "LWP1"
//   4       4     header length H, u32 little-endian, 1 <= H <= kMaxHeader
//   8       8     body length B, u64 little-endian, B <= the reader's body limit
//   16      H     header: a UTF-8 JSON object
//   16+H    B     body: raw bytes
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lw {

constexpr char     kMagic[4]  = {'L', 'W', 'P', '1'};
constexpr size_t   kPrefix    = 16; // magic, header size, body size
constexpr uint32_t kMaxHeader = 1u << 20;

struct frame {
    std::string          header;
    std::vector<uint8_t> body;
};

enum class read_status {
    ok,
    eof,        // clean end of stream before a frame started
    bad_magic,  // the stream does not start with a frame; the reader skipped to the next magic (or EOF)
    too_large,  // header or body over the limit; the frame was skipped
    truncated,  // the stream ended inside a frame
    bad_fragment, // a fragment that does not continue the message being assembled
    io_error,
};

class frame_reader {
public:
    frame_reader(int fd, uint64_t max_body) : fd_(fd), max_body_(max_body) {}

    // frames from a buffer that stays alive while the reader is used (tests, fuzzing)
    frame_reader(const uint8_t * data, size_t size, uint64_t max_body)
        : fd_(-1), max_body_(max_body), mem_(data), mem_size_(size) {}

    // reads the next frame; after bad_magic and too_large (reported at once, without waiting for more input)
    // the next read first skips to the next magic
    read_status read(frame & out, std::string & error);

    // blocks until a byte is buffered or the input is readable (or at EOF): the wait for the next frame
    void wait_readable();

private:
    bool fill(size_t n);          // ensure n bytes are buffered; false on EOF/error
    bool skip_to_magic();         // drop bytes until the buffer starts with the magic; false on EOF

    int                  fd_;
    uint64_t             max_body_;
    const uint8_t *      mem_      = nullptr;
    size_t               mem_size_ = 0;
    std::vector<uint8_t> buf_;
    size_t               pos_    = 0;
    bool                 eof_    = false;
    bool                 resync_ = false; // skip to the next magic before the next frame
};

// writes one frame; returns false on an I/O error
bool write_frame(int fd, const std::string & header, const void * body, uint64_t body_size);

// A message is one frame, or a body over the frame limit cut into fragments: frames whose header holds
// "fragment": {"index", "count", "offset", "total"} and the message id; the last fragment holds the whole
// message header. Fragments come in order: a gap, an overlap, a duplicate or a changing total is an error.
class message_reader {
public:
    message_reader(frame_reader frames, uint64_t max_message)
        : frames_(std::move(frames)), max_message_(max_message) {}

    // a complete message (its header without the fragment field); bad_fragment drops the partial message
    read_status read(frame & out, std::string & error);

    // blocks until the next frame starts to arrive, see frame_reader::wait_readable()
    void wait_readable() { frames_.wait_readable(); }

private:
    frame_reader         frames_;
    uint64_t             max_message_;
    std::vector<uint8_t> body_;      // fragments received so far
    std::string          id_;        // id of the message being assembled, as JSON text
    uint64_t             count_ = 0; // fragments of that message, 0 when none is pending
    uint64_t             total_ = 0;
};

// writes a message, cut into fragments when the body is over max_body; header is a JSON object text. `written`, when
// given, grows by the bytes of every frame written whole (prefixes, headers and bodies)
bool write_message(int fd, const std::string & header, const std::vector<uint8_t> & body, uint64_t max_body,
                   uint64_t * written = nullptr);

} // namespace lw
