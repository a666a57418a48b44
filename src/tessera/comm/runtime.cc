#include "tessera/comm/runtime.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "tessera/comm/flight_recorder.h"
#include "tessera/core/clock.h"
#include "tessera/core/error.h"

namespace tessera::comm {
namespace detail {
namespace {

// Progress id of the barrier in shutdown() (not a group's id: those come from splitmix64).
constexpr uint64_t kShutdownBarrierId = 1;

std::mutex g_instance_mu;
std::unique_ptr<Runtime> g_instance;
bool g_shut_down = false;

}  // namespace

[[noreturn]] void end_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  // Under Open MPI's mpirun, exiting with a non-zero code without MPI_Finalize makes mpirun kill
  // every rank and return that code (orte_abort_on_non_zero_status, on by default). MPI_Abort
  // does the same in principle, but Open MPI 4.1.4's mpirun crashes or hangs when it arrives
  // while other ranks are inside MPI_Finalize (reproduced: ranks done with their work
  // finalising while another rank's watchdog fires), so it is used only under other launchers.
  if (std::getenv("OMPI_MCA_orte_hnp_uri") == nullptr) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

int mpi_count(int64_t n, const char* what) {
  if (n < 0 || n > INT_MAX) {
    throw Error(std::string(what) + ": " + std::to_string(n) +
                " elements per peer exceeds MPI's limit of 2^31-1 per call; split the call");
  }
  return static_cast<int>(n);
}

Runtime::Runtime() {
  int initialised = 0, provided = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    we_initialised_mpi_ = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    throw Error(
        "tessera needs MPI_THREAD_MULTIPLE (communication thread + watchdog); this MPI "
        "provides level " +
        std::to_string(provided));
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  MPI_Comm_dup(MPI_COMM_WORLD, &world_comm_);
  MPI_Comm_dup(MPI_COMM_WORLD, &control_comm_);
  if (const char* v = std::getenv("TESSERA_CHECK_COLLECTIVES")) {
    check_collectives = std::string(v) == "1";
  }
  if (const char* dir = std::getenv("TESSERA_FLIGHT_RECORDER_DIR")) {
    int64_t entries = kDefaultFlightRecorderEntries;
    if (const char* v = std::getenv("TESSERA_FLIGHT_RECORDER_SIZE")) {
      char* end = nullptr;
      entries = std::strtoll(v, &end, 10);
      if (end == v || *end != '\0' || entries < 0)
        throw Error(std::string("TESSERA_FLIGHT_RECORDER_SIZE='") + v +
                    "' is not a number of entries (>= 0)");
    }
    FlightRecorder::instance().configure(entries, dir, world_rank_, world_size_);
  }
  if (const char* v = std::getenv("TESSERA_DISTRIBUTED_TIMEOUT_SECONDS")) {
    char* end = nullptr;
    double s = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(s > 0)) {
      throw Error(std::string("TESSERA_DISTRIBUTED_TIMEOUT_SECONDS='") + v +
                  "' is not a positive number of seconds");
    }
    timeout_seconds = s;
  }
  // The process uses one malloc arena (core/memory.cc explains why), set before main().
  comm_thread_ = std::thread([this] {
#ifdef SCHED_BATCH
    // Woken by an issue, an ordinary thread preempted the issuer when no core was idle and ran
    // the operation while the issuer sat switched out (~8 us of a 60 us 1 MiB all_gather on
    // the 2-core VM). A SCHED_BATCH thread (no privilege, same CPU share) does not preempt on
    // wake-up: the issuer keeps its core and, if it waits at once, runs the operation itself
    // (try_run_inline); otherwise this thread starts it on a free core or at the next tick.
    sched_param param{};
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);  // best effort
#endif
    // Kernels this thread runs (a 16-bit reduction's conversions and sums, comm/
    // sixteen_bit_reduction.h) stay on it: on a thread of its own an OpenMP parallel region
    // would otherwise start a team of every core (OMP_NUM_THREADS, not the trainer's
    // --num-threads), competing with backward's team on the same cores.
    omp_set_num_threads(1);
    comm_loop();
  });
  watchdog_thread_ = std::thread([this] { watchdog_loop(); });
}

Runtime& Runtime::get() {
  std::lock_guard<std::mutex> lock(g_instance_mu);
  if (!g_instance) {
    if (g_shut_down) throw Error("tessera communication used after comm::shutdown()");
    g_instance.reset(new Runtime());
  }
  return *g_instance;
}

Runtime* Runtime::running() {
  std::lock_guard<std::mutex> lock(g_instance_mu);
  return g_instance.get();
}

std::shared_ptr<const GroupInfo> Runtime::register_group(std::string name, uint64_t id,
                                                         std::vector<int> members) {
  auto g = std::make_shared<GroupInfo>();
  g->name = std::move(name);
  g->id = id;
  g->members = std::move(members);
  std::lock_guard<std::mutex> lock(groups_mu_);
  auto& p = groups_[id];
  if (!p) p = std::make_shared<GroupProgress>();
  g->progress = p;
  return g;
}

bool Runtime::need_wake_locked() {
  // A notify is a futex syscall, and until the woken thread gets a core it cannot take the
  // queue anyway: while a wake-up is on its way, further ones are skipped. The communication
  // thread re-reads the queue under queue_mu_ before it sleeps again, so nothing is missed.
  if (!comm_sleeping_ || wake_pending_) return false;
  wake_pending_ = true;
  return true;
}

Work Runtime::submit(Task task) {
  auto state = std::make_shared<Work::State>();
  task.state = state;
  task.flight_id = FlightRecorder::instance().issued(task.info);
  bool wake;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    queue_.push_back(std::move(task));
    wake = need_wake_locked();
  }
  if (wake) queue_cv_.notify_one();
  return Work(state);
}

namespace {

void finish(Task& task, bool failed, const std::string& error) {
  task.run = nullptr;  // drops the tensor handles the task kept alive
  task.start_nonblocking = nullptr;
  task.on_complete = nullptr;
  FlightRecorder::instance().ended(task.flight_id, failed);
  auto& st = *task.state;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.failed = failed;
    st.error = error;
    st.done.store(true, std::memory_order_release);
  }
  st.cv.notify_all();
}

}  // namespace

MPI_Request Runtime::execute(Task& task, bool& failed, std::string& error) {
  if (task.info.seq > 0) task.info.group->progress->started.store(task.info.seq);
  FlightRecorder::instance().started(task.flight_id);
  {
    std::lock_guard<std::mutex> lock(current_mu_);
    current_running_ = true;
    ++current_token_;
    current_start_ = Clock::now();
    current_info_ = task.info;
  }
  MPI_Request req = MPI_REQUEST_NULL;
  try {
    if (task.start_nonblocking) {
      req = task.start_nonblocking();
    } else {
      task.run();
    }
  } catch (const std::exception& e) {
    failed = true;
    error = e.what();
  }
  std::lock_guard<std::mutex> lock(current_mu_);
  current_running_ = false;
  return req;
}

bool Runtime::try_run_inline(const std::shared_ptr<Work::State>& state) {
  Task task;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (comm_busy_ || inline_running_ || queue_.empty() || queue_.front().state != state ||
        queue_.front().start_nonblocking)
      return false;
    task = std::move(queue_.front());
    queue_.pop_front();
    inline_running_ = true;
  }
  bool failed = false;
  std::string error;
  execute(task, failed, error);
  bool wake;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    inline_running_ = false;
    wake = !queue_.empty() && need_wake_locked();  // tasks issued meanwhile
  }
  if (wake) queue_cv_.notify_one();
  finish(task, failed, error);
  return true;
}

void Runtime::comm_loop() {
  // Point-to-point transfers are started nonblocking (MPI_Isend/MPI_Irecv) in issue order and
  // completed here, so two ranks that send to each other before receiving (a pipeline
  // schedule's pattern) cannot deadlock on one communication thread.
  std::vector<Task> pending;
  std::vector<MPI_Request> requests;
  std::vector<int> indices;
  int idle_rounds = 0;
  for (;;) {
    Task task;
    bool have_task = false;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      comm_busy_ = !pending.empty();
      const auto ready = [&] { return !queue_.empty() && !inline_running_; };
      comm_sleeping_ = true;
      if (pending.empty()) {
        while (!(stop_comm_ && !inline_running_) && !ready()) {
          queue_cv_.wait(lock);
          wake_pending_ = false;
        }
      } else if (!ready() && idle_rounds > 64) {
        // Poll pending transfers without burning a core: back off to 200 us sleeps.
        queue_cv_.wait_for(lock, std::chrono::microseconds(200));
        wake_pending_ = false;
      }
      comm_sleeping_ = false;
      if (ready()) {
        task = std::move(queue_.front());
        queue_.pop_front();
        have_task = true;
        comm_busy_ = true;
      } else if (stop_comm_ && pending.empty() && queue_.empty() && !inline_running_) {
        return;
      }
    }
    if (have_task) {
      idle_rounds = 0;
      bool failed = false;
      std::string error;
      const MPI_Request req = execute(task, failed, error);
      if (req != MPI_REQUEST_NULL) {
        {
          std::lock_guard<std::mutex> lock(current_mu_);
          pending_infos_.push_back({Clock::now(), ++current_token_, task.info});
        }
        requests.push_back(req);
        pending.push_back(std::move(task));
      } else {
        finish(task, failed, error);
      }
    } else {
      ++idle_rounds;
    }
    if (!pending.empty()) {
      int outcount = 0;
      indices.resize(requests.size());
      MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &outcount, indices.data(),
                   MPI_STATUSES_IGNORE);
      if (outcount > 0 && outcount != MPI_UNDEFINED) {
        std::vector<bool> completed(requests.size(), false);
        for (int i = 0; i < outcount; ++i) completed[indices[i]] = true;
        size_t w = 0;
        {
          std::lock_guard<std::mutex> lock(current_mu_);
          for (size_t i = 0; i < requests.size(); ++i) {
            if (completed[i]) {
              const std::string problem =
                  pending[i].on_complete ? pending[i].on_complete() : std::string();
              finish(pending[i], !problem.empty(), problem);
              continue;
            }
            requests[w] = requests[i];
            if (w != i) {
              pending_infos_[w] = std::move(pending_infos_[i]);
              pending[w] = std::move(pending[i]);
            }
            ++w;
          }
          requests.resize(w);
          pending.resize(w);
          pending_infos_.resize(w);
        }
        idle_rounds = 0;
      }
    }
  }
}

void Runtime::shutdown() {
  // Nobody finalises before everybody got here. Besides being tidy, this keeps ranks out of
  // MPI_Finalize while another rank may still fail: Open MPI 4.1.4's mpirun crashes or hangs
  // when a rank dies while others are inside MPI_Finalize, but handles it (kills the job)
  // when they are in an ordinary collective. The barrier is watched like any operation.
  if (world_size_ > 1) {
    std::vector<int> ranks(world_size_);
    std::iota(ranks.begin(), ranks.end(), 0);
    Task t;
    t.info.group = register_group("world", kShutdownBarrierId, std::move(ranks));
    t.info.op = "barrier";
    t.info.seq = 1;
    t.info.file = "comm::shutdown()";
    MPI_Comm comm = world_comm_;
    t.run = [comm] { MPI_Barrier(comm); };
    submit(std::move(t)).wait();
  }
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stop_comm_ = true;
  }
  queue_cv_.notify_all();
  if (comm_thread_.joinable()) comm_thread_.join();
  stop_watchdog_ = true;
  if (watchdog_thread_.joinable()) watchdog_thread_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (we_initialised_mpi_ && !finalized) MPI_Finalize();
}

}  // namespace detail

void shutdown() {
  std::unique_ptr<detail::Runtime> rt;
  {
    std::lock_guard<std::mutex> lock(detail::g_instance_mu);
    rt = std::move(detail::g_instance);
    detail::g_shut_down = true;
  }
  if (rt) rt->shutdown();
}

void abort_job(const std::string& message, int code) {
  int initialised = 0, finalized = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalized);
  int rank = 0, size = 1;
  if (initialised && !finalized) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  if (size == 1) {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    if (initialised && !finalized) shutdown();
    std::exit(code);
  }
  // Rank 0 normally saw the same error: give it time to take everyone down with one message.
  if (rank != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
  std::fprintf(stderr, "%s\n", message.c_str());
  detail::end_job(code);
}

int run_on_ranks(const ProcessGroup& world, const char* tool, const std::function<int()>& body) {
  try {
    return body();
  } catch (const Error& e) {
    if (world.size() == 1) throw;
    std::fflush(stdout);
    abort_job(std::string(tool) + ": error: " + one_line(e.what()), kUserErrorExitCode);
  } catch (const std::exception& e) {
    // Another library's (e.g. std::bad_alloc for a cache too large): run_tool would return 1
    // from this rank alone and leave the others waiting in a collective until the watchdog.
    if (world.size() == 1) throw;
    std::fflush(stdout);
    abort_job(std::string(tool) + ": internal error: " + one_line(e.what()), 1);
  }
}

}  // namespace tessera::comm
