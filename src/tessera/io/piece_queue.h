// Internal to io/: the bookkeeping both AsyncIo backends share. A request is cut into pieces of
// block_size bytes; the pieces wait in a queue until a backend starts them, and each request
// counts its outstanding pieces and keeps the error of its failed piece at the lowest offset.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/io/async_io.h"

namespace tessera::io {

// One piece of a request: `io` is the piece's own file, buffer, bytes, offset and direction (what
// the fault injector is shown).
struct Piece {
  AsyncIo::Ticket ticket = 0;
  IoRequest io;
};

// A piece across the system calls that transfer it: a partial transfer leaves a remainder that
// the next call moves. Used by one thread at a time.
class PieceProgress {
 public:
  explicit PieceProgress(const Piece& piece) : piece_(piece) {}

  const Piece& piece() const { return piece_; }
  // Where the next system call starts, and how much it has left to move.
  char* buffer() const { return static_cast<char*>(piece_.io.buffer) + done_; }
  int64_t offset() const { return piece_.io.offset + done_; }
  int64_t remaining() const { return piece_.io.bytes - done_; }
  int64_t done() const { return done_; }

  // Takes one system call's result: bytes moved (>= 0) or -errno. Returns true when the piece is
  // finished (every byte moved, or failed: error() non-empty), false when another call must move
  // the remainder (after a partial transfer, EINTR or EAGAIN). A read that moves 0 bytes is at
  // the end of the file: a short read.
  bool advance(int64_t result);
  // Fails the piece with errno `err` without a system call (fault injection).
  void fail(int err);
  const std::string& error() const { return error_; }

 private:
  Piece piece_;
  int64_t done_ = 0;
  std::string error_;
};

// The requests of one engine: tickets, the queue of pieces not started, outstanding pieces and
// errors per request. Thread-safe: the owner's thread submits and waits, backend threads take
// and complete pieces.
class PieceQueue {
 public:
  // At most `max_in_flight` pieces are between take() and complete() at any time.
  PieceQueue(int64_t block_size, int max_in_flight);

  // Checks the request (tessera::Error naming the file and the misaligned value), cuts it into
  // pieces and queues them. Returns the request's ticket.
  AsyncIo::Ticket submit(const IoRequest& request);
  // Replaces `out` with up to `max` queued pieces, never letting more than max_in_flight be in
  // flight. With `block`, first waits until at least one can be taken or stop() is called.
  // Returns false once stop() has been called (`out` then empty).
  bool take(int max, bool block, std::vector<Piece>* out);
  // Records a finished piece (successful when its error is empty) and wakes its request's waiter.
  void complete(const PieceProgress& progress);

  // AsyncIo::wait and AsyncIo::wait_all.
  void wait(AsyncIo::Ticket ticket);
  void wait_all();

  // Drops the pieces not started and makes take() return false: for the backends' destructors,
  // which then let the started pieces finish.
  void stop();
  // Wall time during which at least one piece was queued or in flight, in seconds: the time
  // the engine was busy, measured at each submit and completion.
  double busy_seconds();

 private:
  struct RequestState {
    int64_t pending = 0;  // pieces not completed
    std::string error;
    int64_t error_offset = 0;
  };

  const int64_t block_size_;
  const int max_in_flight_;
  std::mutex mutex_;
  std::condition_variable work_cv_;  // backends: pieces to take, or stop
  std::condition_variable done_cv_;  // owner: a request completed
  std::deque<Piece> queued_;
  std::map<AsyncIo::Ticket, RequestState> requests_;  // node-based: entries stay put
  AsyncIo::Ticket next_ticket_ = 1;
  int64_t pending_pieces_ = 0;  // over all requests
  int in_flight_ = 0;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point busy_since_;  // when pending_pieces_ left 0
  double busy_s_ = 0;                                 // closed busy intervals
};

}  // namespace tessera::io
