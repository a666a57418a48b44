#include "tessera/io/piece_queue.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::io {
namespace {

const char* direction(const IoRequest& io) { return io.write ? "write" : "read"; }

std::string failure(const IoRequest& io, int64_t offset, int64_t bytes, const std::string& why) {
  return std::string(direction(io)) + " of " + io.file->path() + " at offset " +
         std::to_string(offset) + " (" + std::to_string(bytes) + " bytes) failed: " + why;
}

std::string short_read(const IoRequest& io, int64_t got) {
  return "short read of " + io.file->path() + " at offset " + std::to_string(io.offset) + ": got " +
         std::to_string(got) + " of " + std::to_string(io.bytes) + " bytes";
}

void check_request(const IoRequest& request) {
  TESSERA_CHECK(request.file != nullptr && request.file->fd() >= 0);
  const DirectFile& file = *request.file;
  const std::string what = std::string(direction(request)) + " of " + file.path() + ": ";
  const DirectIoAlignment align = file.alignment();
  auto expected = [](int64_t alignment) {
    return ": expected a multiple of the file's direct I/O alignment " + std::to_string(alignment);
  };
  if (request.offset < 0 || request.offset % align.offset != 0) {
    throw Error(what + "offset " + std::to_string(request.offset) + expected(align.offset));
  }
  if (request.bytes < 0 || request.bytes % align.offset != 0) {
    throw Error(what + "length " + std::to_string(request.bytes) + " bytes" +
                expected(align.offset));
  }
  const auto address = reinterpret_cast<uintptr_t>(request.buffer);
  if (request.bytes > 0 &&
      (request.buffer == nullptr || address % static_cast<uintptr_t>(align.memory) != 0)) {
    std::ostringstream hex;
    hex << std::hex << address;
    throw Error(what + "buffer address 0x" + hex.str() + expected(align.memory));
  }
  if (request.write && !file.writable()) throw Error(what + "the file was opened read-only");
}

}  // namespace

bool PieceProgress::advance(int64_t result) {
  const IoRequest& io = piece_.io;
  if (result == -EINTR || result == -EAGAIN) return false;
  if (result < 0) {
    error_ = failure(io, offset(), remaining(), std::strerror(static_cast<int>(-result)));
    return true;
  }
  if (result == 0) {
    error_ =
        io.write ? failure(io, offset(), remaining(), "no bytes written") : short_read(io, done_);
    return true;
  }
  TESSERA_CHECK(result <= remaining());
  done_ += result;
  if (remaining() == 0) return true;
  // O_DIRECT stops short only at block granularity (end of file, a size limit); a remainder
  // the kernel could not take is the end of a file whose size is not aligned, for a read.
  const DirectIoAlignment align = io.file->alignment();
  const bool aligned =
      offset() % align.offset == 0 && reinterpret_cast<uintptr_t>(buffer()) % align.memory == 0;
  if (!aligned) {
    const char* why = "the file system stopped at an unaligned offset";
    error_ = io.write ? failure(io, offset(), remaining(), why) : short_read(io, done_);
    return true;
  }
  return false;
}

void PieceProgress::fail(int err) {
  error_ = failure(piece_.io, offset(), remaining(), std::strerror(err));
}

PieceQueue::PieceQueue(int64_t block_size, int max_in_flight)
    : block_size_(block_size), max_in_flight_(max_in_flight) {
  TESSERA_CHECK(block_size_ > 0 && max_in_flight_ > 0);
}

AsyncIo::Ticket PieceQueue::submit(const IoRequest& request) {
  check_request(request);
  // Pieces must start at aligned offsets even on a file system stricter than block_size.
  const int64_t piece_bytes = align_up(block_size_, request.file->alignment().offset);
  std::lock_guard<std::mutex> lock(mutex_);
  const AsyncIo::Ticket ticket = next_ticket_++;
  if (request.bytes == 0) return ticket;
  RequestState& state = requests_[ticket];
  for (int64_t at = 0; at < request.bytes; at += piece_bytes) {
    Piece piece{ticket, request};
    piece.io.buffer = static_cast<char*>(request.buffer) + at;
    piece.io.offset = request.offset + at;
    piece.io.bytes = std::min(piece_bytes, request.bytes - at);
    queued_.push_back(piece);
    ++state.pending;
  }
  if (pending_pieces_ == 0) busy_since_ = std::chrono::steady_clock::now();
  pending_pieces_ += state.pending;
  work_cv_.notify_all();
  return ticket;
}

bool PieceQueue::take(int max, bool block, std::vector<Piece>* out) {
  out->clear();
  std::unique_lock<std::mutex> lock(mutex_);
  if (block) {
    work_cv_.wait(lock,
                  [&] { return stopping_ || (!queued_.empty() && in_flight_ < max_in_flight_); });
  }
  if (stopping_) return false;
  while (static_cast<int>(out->size()) < max && !queued_.empty() && in_flight_ < max_in_flight_) {
    out->push_back(queued_.front());
    queued_.pop_front();
    ++in_flight_;
  }
  return true;
}

void PieceQueue::complete(const PieceProgress& progress) {
  std::lock_guard<std::mutex> lock(mutex_);
  --in_flight_;
  if (--pending_pieces_ == 0)
    busy_s_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
  auto it = requests_.find(progress.piece().ticket);
  TESSERA_CHECK(it != requests_.end());
  RequestState& state = it->second;
  const int64_t offset = progress.piece().io.offset;
  if (!progress.error().empty() && (state.error.empty() || offset < state.error_offset)) {
    state.error = progress.error();
    state.error_offset = offset;
  }
  if (--state.pending == 0) done_cv_.notify_all();
  if (!queued_.empty()) work_cv_.notify_one();  // a slot in flight is free again
}

void PieceQueue::wait(AsyncIo::Ticket ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  TESSERA_CHECK_MSG(ticket > 0 && ticket < next_ticket_,
                    "ticket " + std::to_string(ticket) + " was not issued by this engine");
  auto it = requests_.find(ticket);
  if (it == requests_.end()) return;  // empty, or waited for already
  done_cv_.wait(lock, [&] { return it->second.pending == 0; });
  const std::string error = std::move(it->second.error);
  requests_.erase(it);
  if (!error.empty()) throw Error(error);
}

void PieceQueue::wait_all() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return pending_pieces_ == 0; });
  std::string first;
  int others = 0;
  for (const auto& [ticket, state] : requests_) {
    if (state.error.empty()) continue;
    if (first.empty()) {
      first = state.error;
    } else {
      ++others;
    }
  }
  requests_.clear();
  if (others > 0) first += " (and " + std::to_string(others) + " other requests failed)";
  if (!first.empty()) throw Error(first);
}

double PieceQueue::busy_seconds() {
  std::lock_guard<std::mutex> lock(mutex_);
  const double open =
      pending_pieces_ > 0
          ? std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count()
          : 0.0;
  return busy_s_ + open;
}

void PieceQueue::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = true;
  pending_pieces_ -= static_cast<int64_t>(queued_.size());
  queued_.clear();
  work_cv_.notify_all();
}

}  // namespace tessera::io
