#include "tessera/tensorboard/event_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/tensorboard/crc32c.h"

namespace tessera::tensorboard {
namespace {

// Protobuf wire format: a field's key is (number << 3) | wire type; varints are little-endian
// base-128; fixed64/fixed32 are little-endian bytes.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_fixed(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_double(std::string& out, int field, double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  put_varint(out, (uint64_t(field) << 3) | 1);  // wire type 1: 64-bit
  put_fixed(out, bits, 8);
}
void put_float(std::string& out, int field, float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  put_varint(out, (uint64_t(field) << 3) | 5);  // wire type 5: 32-bit
  put_fixed(out, bits, 4);
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_varint(out, (uint64_t(field) << 3) | 2);  // wire type 2: length-delimited
  put_varint(out, bytes.size());
  out += bytes;
}
void put_int64(std::string& out, int field, int64_t v) {
  put_varint(out, (uint64_t(field) << 3) | 0);  // wire type 0: varint (two's complement)
  put_varint(out, static_cast<uint64_t>(v));
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

}  // namespace

std::string file_version_event(double wall_time) {
  std::string out;
  put_double(out, 1, wall_time);
  put_bytes(out, 3, "brain.Event:2");
  return out;
}

std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string v;  // Summary.Value
  put_bytes(v, 1, tag);
  put_float(v, 2, value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string out;
  put_double(out, 1, wall_time);
  put_int64(out, 2, step);
  put_bytes(out, 5, summary);
  return out;
}

std::string tfrecord(const std::string& data) {
  std::string out;
  put_fixed(out, data.size(), 8);
  put_fixed(out, mask_crc(crc32c(out.data(), 8)), 4);
  out += data;
  put_fixed(out, mask_crc(crc32c(data.data(), data.size())), 4);
  return out;
}

EventFileWriter::EventFileWriter(const std::string& dir, int queue_size)
    : queue_size_(static_cast<size_t>(std::max(queue_size, 1))) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw Error("--tensorboard-dir " + dir + ": cannot create the directory (" + ec.message() +
                ")");
  const double t = now_seconds();
  // Two writers started in the same second in one directory (a test, a restarted job) get
  // distinct names: the last field counts up past existing files.
  for (int n = 0;; ++n) {
    path_ = (std::filesystem::path(dir) /
             ("events.out.tfevents." + std::to_string(static_cast<int64_t>(t)) + "." + host_name() +
              "." + std::to_string(getpid()) + "." + std::to_string(n)))
                .string();
    if (!std::filesystem::exists(path_)) break;
  }
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr)
    throw Error("--tensorboard-dir " + dir + ": cannot create " + path_ + " (" +
                std::strerror(errno) + ")");
  queue_.push_back(tfrecord(file_version_event(t)));
  ++added_;
  thread_ = std::thread([this] { run(); });
}

EventFileWriter::~EventFileWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
  std::fclose(file_);
}

void EventFileWriter::throw_if_failed() const {
  if (!error_.empty()) throw Error("TensorBoard event file " + path_ + ": " + error_);
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  std::string record = tfrecord(scalar_event(now_seconds(), step, tag, static_cast<float>(value)));
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return queue_.size() < queue_size_ || !error_.empty(); });
  throw_if_failed();
  queue_.push_back(std::move(record));
  ++added_;
  if (queue_.size() >= queue_size_) changed_.notify_all();  // full: the writer's turn
}

void EventFileWriter::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t target = added_;
  flush_target_ = std::max(flush_target_, target);
  changed_.notify_all();
  changed_.wait(lock, [&] { return written_ >= target || !error_.empty(); });
  throw_if_failed();
}

void EventFileWriter::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait_for(lock, std::chrono::duration<double>(kFlushSeconds), [&] {
      return queue_.size() >= queue_size_ || written_ < flush_target_ || stop_;
    });
    if (queue_.empty()) {
      if (stop_) return;  // everything written
      continue;
    }
    std::deque<std::string> batch;
    batch.swap(queue_);
    changed_.notify_all();  // room in the queue
    lock.unlock();
    bool ok = true;
    for (const std::string& r : batch)
      ok = ok && std::fwrite(r.data(), 1, r.size(), file_) == r.size();
    ok = ok && std::fflush(file_) == 0;
    const int err = errno;
    lock.lock();
    if (!ok && error_.empty()) error_ = std::string("write failed (") + std::strerror(err) + ")";
    written_ += batch.size();
    changed_.notify_all();
    if (!error_.empty()) return;
  }
}

}  // namespace tessera::tensorboard
