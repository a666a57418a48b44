// TensorBoard event files, as TensorFlow's EventsWriter writes them and TensorBoard (and
// torch.utils.tensorboard's SummaryWriter, which Megatron-LM logs through) reads them:
//
//   file  events.out.tfevents.<unix seconds>.<host>.<pid>.<n>  in the log directory
//   each record (TFRecord): uint64 length | uint32 masked CRC-32C of those 8 bytes | data |
//                           uint32 masked CRC-32C of the data          (little-endian, crc32c.h)
//   data: a protobuf tensorflow.Event (tensorflow/core/util/event.proto): wall_time = 1 (double),
//         step = 2 (int64), file_version = 3 (string; "brain.Event:2" in the first record),
//         summary = 5 (tensorflow.Summary, summary.proto: repeated Value value = 1; Value:
//         tag = 1 (string), simple_value = 2 (float)).
//
// The two events are encoded here by hand (a dozen bytes of protobuf wire format each) rather
// than through libprotobuf and generated code: that would add a code generator to the build for
// three fields. tests/unit/tensorboard checks the bytes against hand-worked encodings, and
// tests/cli/tensorboard.sh reads a training run's file with Python's protobuf runtime and another
// CRC-32C implementation.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace tessera::tensorboard {

// The protobuf bytes of Event{wall_time, file_version: "brain.Event:2"}.
std::string file_version_event(double wall_time);
// The protobuf bytes of Event{wall_time, step, summary {value {tag, simple_value}}}.
std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value);
// `data` framed as one TFRecord.
std::string tfrecord(const std::string& data);

// One event file, written by a thread of its own so the training thread only queues records.
// Thread-safe. Events reach the file in the order they were added. Like torch's SummaryWriter
// (max_queue, flush_secs), the writer thread wakes only when the queue is full, when flush() asks,
// or every kFlushSeconds: waking it for every scalar cost ~2% of a small model's step on two cores
// (bench/tensorboard.sh), the writer preempting the training threads.
class EventFileWriter {
 public:
  static constexpr double kFlushSeconds = 2.0;
  // Creates `dir` (and its parents) and a new event file in it, whose first record is the
  // file-version event. At most `queue_size` (>= 1) events wait for the writer thread; an
  // add_scalar beyond that waits for room (nothing is dropped). Throws tessera::Error (one line
  // naming the directory) when the directory or the file cannot be created.
  EventFileWriter(const std::string& dir, int queue_size);
  // Writes what is queued and closes the file.
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Queues a scalar (stored as a float, TensorBoard's simple_value) at `step`, stamped with the
  // current wall time. Throws tessera::Error if an earlier write failed (disk full).
  void add_scalar(const std::string& tag, double value, int64_t step);
  // Returns once every event added before it is written and flushed to the operating system.
  void flush();
  const std::string& path() const { return path_; }

 private:
  void run();                    // the writer thread
  void throw_if_failed() const;  // with mutex_ held

  std::string path_;
  std::FILE* file_ = nullptr;
  size_t queue_size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> queue_;  // framed records
  uint64_t added_ = 0, written_ = 0;
  uint64_t flush_target_ = 0;  // flush() waits until this many are written
  bool stop_ = false;
  std::string error_;  // the first write error, if any
  std::thread thread_;
};

}  // namespace tessera::tensorboard
