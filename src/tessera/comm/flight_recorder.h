// Internal to comm/: the flight recorder, the process's last N communication operations, as
// PyTorch's NCCL flight recorder keeps them (TORCH_NCCL_TRACE_BUFFER_SIZE), for the one question
// a hung job leaves: which rank stopped where while the others waited.
//
// Contract:
//  - Off until configure() gives it a capacity and a directory (ProcessGroup::
//    set_flight_recorder, tessera-train's --flight-recorder-dir; TESSERA_FLIGHT_RECORDER_DIR and
//    TESSERA_FLIGHT_RECORDER_SIZE for any binary). Off, every call below is one relaxed load.
//  - The runtime records each task when it is issued (issued(), on the issuing thread), when it
//    starts on the communication thread or inline (started()) and when it completes or fails
//    (ended()). A ring of `capacity` entries: the oldest are overwritten.
//  - dump() writes the ring to DIR/flight_recorder.rank<R>.json (format in docs/observability.md;
//    read by tools/tessera-flight.cc through comm/flight_report.h): at most once per process, the
//    first reason wins. The runtime's watchdog dumps before it ends the job and asks every
//    other rank to dump too (runtime.cc); a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
//    SIGABRT) and SIGTERM (how a launcher ends the other ranks after one died) dump from their
//    handler, best effort (it allocates and writes JSON: not async-signal-safe, as PyTorch's
//    dump on a crash is not), then the signal takes its previous course.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/comm/runtime.h"

namespace tessera::comm::detail {

class FlightRecorder {
 public:
  static FlightRecorder& instance();

  // Starts recording into a ring of `capacity` entries, dumped to `dir` (created at the dump).
  // capacity 0 or an empty dir: off. Installs the fatal-signal handlers once.
  void configure(int64_t capacity, const std::string& dir, int world_rank, int world_size);
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  const std::string& dir() const { return dir_; }

  // The id of the new entry (0 when off), kept with the task for started() / ended().
  uint64_t issued(const TaskInfo& info);
  void started(uint64_t id);
  void ended(uint64_t id, bool failed);

  // Writes the dump (once per process; later calls return false). `reason` says why: "watchdog
  // timeout: ...", "requested by world rank R: ...", "signal 11". Returns true if it wrote.
  bool dump(const std::string& reason);
  // From a signal handler: dump() unless another thread holds the ring's lock.
  void dump_from_signal(int signal);

 private:
  FlightRecorder() = default;
  struct Entry {
    uint64_t id = 0;  // 0: unused slot
    TaskInfo info;
    int64_t issued_us = 0, started_us = 0, ended_us = 0;  // wall clock, microseconds; 0: not yet
    bool failed = false;
  };
  Entry* slot_locked(uint64_t id);  // the entry of `id` if still in the ring

  std::atomic<bool> enabled_{false};
  std::atomic<bool> dumped_{false};
  std::mutex mu_;
  std::vector<Entry> ring_;
  uint64_t next_id_ = 1;
  std::string dir_;
  int world_rank_ = 0, world_size_ = 1;
};

// The watchdog's side of "every reachable rank dumps": on the runtime's control communicator
// (tags kTagDump / kTagDumpAck, apart from the watchdog's queries), serve_requests() answers
// other ranks' requests (dump, acknowledge) and dump_everywhere() dumps this rank and asks every
// other rank to, waiting up to kWaitSeconds for their acknowledgements while still answering
// requests, so two ranks ending the job at once do not wait on each other. Watchdog thread only.
class FlightDumpExchange {
 public:
  static constexpr int kTagDump = 103;
  static constexpr int kTagDumpAck = 104;
  static constexpr double kWaitSeconds = 5.0;

  FlightDumpExchange(MPI_Comm control, int world_rank, int world_size);
  ~FlightDumpExchange();  // cancels the posted receive, completes the acknowledgements
  void serve_requests();
  // `meanwhile` runs at every poll of the wait (the watchdog answers its status queries there).
  void dump_everywhere(const std::string& why, const std::function<void()>& meanwhile);

 private:
  struct Request {
    char reason[240];  // the requester's verdict
  };
  MPI_Comm control_;
  int world_rank_, world_size_;
  Request incoming_{};
  MPI_Request incoming_req_ = MPI_REQUEST_NULL;
  std::vector<std::unique_ptr<int>> ack_bufs_;
  std::vector<MPI_Request> ack_reqs_;
};

}  // namespace tessera::comm::detail
