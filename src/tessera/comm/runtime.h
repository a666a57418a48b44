// Internal to comm/: the per-process communication runtime behind ProcessGroup.
//  - MPI initialisation (MPI_THREAD_MULTIPLE) and finalisation.
//  - The communication thread: one FIFO queue of tasks, executed in issue order. A waiter whose
//    task is at the head of an idle queue runs it itself (try_run_inline).
//  - The watchdog thread (watchdog.cc): times the running task; on a timeout asks the task's
//    group members over a private control communicator (nonblocking point-to-point, tags
//    kTagQuery/kTagReply) how many collectives of that group they have started, prints one
//    message naming the ranks that did not arrive and ends the job (end_job). It also answers
//    such queries from other ranks. With the flight recorder on (flight_recorder.h), before
//    ending the job it dumps this rank's record and asks every other rank to dump theirs (tags
//    kTagDump/kTagDumpAck), waiting a few seconds for their acknowledgements while it keeps
//    answering queries and such requests.
// Nothing outside comm/ includes this header.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/comm/process_group.h"

namespace tessera::comm {

// Shared state of a Work handle.
struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  bool failed = false;
  std::string error;
};

namespace detail {

// How far this process got on one group: the number of collectives it has started (the
// sequence number of the last one begun on the communication thread).
struct GroupProgress {
  std::atomic<int64_t> started{0};
};

// A group's identity, the one record of it: made once per group (Runtime::register_group),
// held by its ProcessGroup and shared by its tasks, so issuing an operation copies one pointer
// instead of a name and a rank list.
struct GroupInfo {
  std::string name;
  uint64_t id = 0;           // identical on every member; used by the watchdog's side channel
  std::vector<int> members;  // world ranks of the group, in group order
  std::shared_ptr<GroupProgress> progress;
};

// What the watchdog needs to know about a task. The text is formatted by describe() only when a
// message needs it: formatting it (and copying the group's name and ranks) on every issue cost
// ~0.4 us per operation.
struct TaskInfo {
  std::shared_ptr<const GroupInfo> group;
  const char* op = "";  // "all_reduce", "send to", "new_subgroups", ... (static strings)
  int64_t seq = 0;      // collective sequence number on the group (1-based); 0 = p2p
  int64_t count = -1;   // elements; -1: not shown
  DType dtype = DType::kF32;
  int peer = -1;               // for send/recv: the peer's rank in the group
  int peer_world = -1;         // for send/recv: the peer's world rank
  const char* file = nullptr;  // call site (source_location strings are static); with line 0
  unsigned line = 0;           // and count -1 a free text: "(in comm::shutdown())"
  std::string label;           // new_subgroups: the new groups' name
  // "all_reduce #3 (fp32, 100 elements, at f.cc:12)", "recv from rank 1 (fp32, ...)",
  // "new_subgroups('tp') #2", "barrier #1 (in comm::shutdown())".
  std::string describe() const;
};

struct Task {
  TaskInfo info;
  std::function<void()> run;  // throws tessera::Error (or anything) on failure
  // Instead of run: starts a nonblocking transfer; the task completes with the request.
  std::function<MPI_Request()> start_nonblocking;
  // Optional, with start_nonblocking: called on the communication thread once the transfer
  // completed; a non-empty result fails the task with that message (checked receives).
  std::function<std::string()> on_complete;
  std::shared_ptr<Work::State> state;
  uint64_t flight_id = 0;  // its flight-recorder entry (flight_recorder.h), 0: not recorded
};

class Runtime {
 public:
  // The runtime, initialising MPI and starting the threads on the first call.
  static Runtime& get();
  // The runtime if get() was called and shutdown() was not, else nullptr.
  static Runtime* running();

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // A duplicate of MPI_COMM_WORLD for the world group's traffic.
  MPI_Comm world_comm() const { return world_comm_; }

  // Queues a task on the communication thread; returns its Work.
  Work submit(Task task);
  // Called by Work::wait(): if the task of `state` is a collective at the head of the queue and
  // the communication thread is idle (nothing running, no transfer in flight), runs it on the
  // calling thread and returns true. Issue order is kept: the communication thread takes no
  // task while one runs inline. A synchronous collective then costs no thread hand-off (two
  // context switches, ~8 us on the shared 2-core VM: 13% of a 1 MiB all_gather), provided the
  // wake-up at issue did not already hand the core to the communication thread: hence
  // SCHED_BATCH for that thread (runtime.cc).
  bool try_run_inline(const std::shared_ptr<Work::State>& state);

  // The record of group `id` named `name` with world ranks `members` (in group order). Its
  // progress counter is the one the watchdog reports to other ranks asking about `id`.
  std::shared_ptr<const GroupInfo> register_group(std::string name, uint64_t id,
                                                  std::vector<int> members);

  std::atomic<bool> check_collectives{false};
  std::atomic<double> timeout_seconds{600.0};

  // Stops the threads (after draining the queue) and finalises MPI.
  void shutdown();

 private:
  Runtime();
  void comm_loop();
  // Wakes the communication thread if it sleeps and no wake-up is on its way yet; call with
  // queue_mu_ held, then notify queue_cv_ after unlocking if it returns true.
  bool need_wake_locked();
  void watchdog_loop();
  // Runs one task with the watchdog's bookkeeping; returns the request of a started transfer.
  MPI_Request execute(Task& task, bool& failed, std::string& error);

  int world_rank_ = 0;
  int world_size_ = 1;
  bool we_initialised_mpi_ = false;
  MPI_Comm world_comm_ = MPI_COMM_NULL;
  MPI_Comm control_comm_ = MPI_COMM_NULL;

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Task> queue_;
  bool stop_comm_ = false;
  bool comm_busy_ = false;       // the comm thread runs a task or has transfers in flight
  bool inline_running_ = false;  // a waiter runs a task itself (try_run_inline)
  bool comm_sleeping_ = false;   // the comm thread waits on queue_cv_
  bool wake_pending_ = false;    // notified, and has not run since (see need_wake_locked)

  // The task running on the communication thread (watchdog reads it).
  std::mutex current_mu_;
  bool current_running_ = false;
  uint64_t current_token_ = 0;
  std::chrono::steady_clock::time_point current_start_;
  TaskInfo current_info_;
  struct PendingInfo {
    std::chrono::steady_clock::time_point start;
    uint64_t token;
    TaskInfo info;
  };
  std::vector<PendingInfo> pending_infos_;  // in-flight point-to-point transfers, oldest first

  std::mutex groups_mu_;
  std::map<uint64_t, std::shared_ptr<GroupProgress>> groups_;

  std::atomic<bool> stop_watchdog_{false};
  std::thread comm_thread_;
  std::thread watchdog_thread_;
};

// Ends the whole job with exit code `code` (after flushing stdio); see runtime.cc for why this
// is not always MPI_Abort.
[[noreturn]] void end_job(int code);

// Converts a 64-bit count to MPI's int, throwing tessera::Error beyond 2^31-1.
int mpi_count(int64_t n, const char* what);

}  // namespace detail
}  // namespace tessera::comm
