#include "tessera/comm/flight_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <thread>

#include "tessera/core/dtype.h"

namespace tessera::comm::detail {
namespace {

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string site_of(const TaskInfo& info) {
  if (info.file == nullptr) return "";
  if (info.line == 0) return info.file;  // a free text: "comm::shutdown()"
  const char* slash = std::strrchr(info.file, '/');
  return std::string(slash ? slash + 1 : info.file) + ":" + std::to_string(info.line);
}

// The signals a crash arrives by, and what their handlers were before ours.
// SIGTERM is how a launcher ends the other ranks when one died: they dump too (unless the
// program handles SIGTERM itself, e.g. tessera-train's --exit-signal-handler, installed later).
constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM};
struct sigaction g_previous[std::size(kFatalSignals)];

void on_fatal_signal(int signal) {
  FlightRecorder::instance().dump_from_signal(signal);
  // Then the signal's previous course (Open MPI's backtrace handler, or the default action).
  for (size_t i = 0; i < std::size(kFatalSignals); ++i)
    if (kFatalSignals[i] == signal) sigaction(signal, &g_previous[i], nullptr);
  std::raise(signal);
}

}  // namespace

FlightRecorder& FlightRecorder::instance() {
  static FlightRecorder* recorder = new FlightRecorder();  // never destroyed: signal handlers
  return *recorder;
}

void FlightRecorder::configure(int64_t capacity, const std::string& dir, int world_rank,
                               int world_size) {
  std::lock_guard<std::mutex> lock(mu_);
  world_rank_ = world_rank;
  world_size_ = world_size;
  dir_ = dir;
  ring_.assign(capacity > 0 && !dir.empty() ? static_cast<size_t>(capacity) : 0, Entry{});
  const bool was_enabled = enabled_.exchange(!ring_.empty());
  if (ring_.empty() || was_enabled) return;
  static bool handlers_installed = false;
  if (handlers_installed) return;
  handlers_installed = true;
  for (size_t i = 0; i < std::size(kFatalSignals); ++i) {
    struct sigaction action {};
    action.sa_handler = on_fatal_signal;
    sigemptyset(&action.sa_mask);
    sigaction(kFatalSignals[i], &action, &g_previous[i]);
  }
}

uint64_t FlightRecorder::issued(const TaskInfo& info) {
  if (!enabled()) return 0;
  const int64_t t = now_us();
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.empty()) return 0;
  const uint64_t id = next_id_++;
  Entry& e = ring_[id % ring_.size()];
  e = Entry{};
  e.id = id;
  e.info = info;
  e.issued_us = t;
  return id;
}

FlightRecorder::Entry* FlightRecorder::slot_locked(uint64_t id) {
  if (id == 0 || ring_.empty()) return nullptr;
  Entry& e = ring_[id % ring_.size()];
  return e.id == id ? &e : nullptr;
}

void FlightRecorder::started(uint64_t id) {
  if (id == 0) return;
  const int64_t t = now_us();
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = slot_locked(id)) e->started_us = t;
}

void FlightRecorder::ended(uint64_t id, bool failed) {
  if (id == 0) return;
  const int64_t t = now_us();
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = slot_locked(id)) {
    e->ended_us = t;
    e->failed = failed;
  }
}

bool FlightRecorder::dump(const std::string& reason) {
  if (!enabled() || dumped_.exchange(true)) return false;
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  std::string dir;
  int rank, size;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dir = dir_;
    rank = world_rank_;
    size = world_size_;
    // Oldest first: the ring's live entries ordered by id.
    std::vector<const Entry*> live;
    for (const Entry& e : ring_)
      if (e.id != 0) live.push_back(&e);
    std::sort(live.begin(), live.end(),
              [](const Entry* a, const Entry* b) { return a->id < b->id; });
    for (const Entry* e : live) {
      const TaskInfo& i = e->info;
      const char* state = e->ended_us     ? (e->failed ? "failed" : "completed")
                          : e->started_us ? "started"
                                          : "issued";
      entries.push_back({{"id", e->id},
                         {"group", i.group ? i.group->name : ""},
                         {"group_id", i.group ? i.group->id : 0},
                         {"ranks", i.group ? i.group->members : std::vector<int>{}},
                         {"op", i.op},
                         {"label", i.label},
                         {"seq", i.seq},
                         {"peer", i.peer_world},
                         {"count", i.count},
                         {"dtype", i.count >= 0 ? dtype_name(i.dtype) : ""},
                         {"site", site_of(i)},
                         {"state", state},
                         {"issued_us", e->issued_us},
                         {"started_us", e->started_us},
                         {"ended_us", e->ended_us}});
    }
  }
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  nlohmann::ordered_json doc = {{"format", "tessera-flight-recorder-1"},
                                {"rank", rank},
                                {"world_size", size},
                                {"host", host},
                                {"pid", static_cast<int64_t>(getpid())},
                                {"reason", reason},
                                {"dump_us", now_us()},
                                {"entries", entries}};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = dir + "/flight_recorder.rank" + std::to_string(rank) + ".json";
  // Written next to its final name and renamed, so a reader never sees half a dump.
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    out << doc.dump(1) << "\n";
    if (!out) {
      std::fprintf(stderr, "tessera flight recorder: cannot write %s\n", partial.c_str());
      return false;
    }
  }
  std::filesystem::rename(partial, path, ec);
  if (ec) std::fprintf(stderr, "tessera flight recorder: cannot write %s\n", path.c_str());
  return !ec;
}

void FlightRecorder::dump_from_signal(int signal) {
  // Not async-signal-safe (it allocates and writes JSON), as PyTorch's own dump on a crash is
  // not: the process is lost anyway, and the dump is what is left of it. Skipped if the
  // signal interrupted a thread holding the ring's lock (taking it would deadlock).
  if (!enabled() || !mu_.try_lock()) return;
  mu_.unlock();
  dump("signal " + std::to_string(signal) + " (" + strsignal(signal) + ")");
}

FlightDumpExchange::FlightDumpExchange(MPI_Comm control, int world_rank, int world_size)
    : control_(control), world_rank_(world_rank), world_size_(world_size) {
  MPI_Irecv(&incoming_, sizeof incoming_, MPI_BYTE, MPI_ANY_SOURCE, kTagDump, control_,
            &incoming_req_);
}

FlightDumpExchange::~FlightDumpExchange() {
  MPI_Cancel(&incoming_req_);
  MPI_Wait(&incoming_req_, MPI_STATUS_IGNORE);
  for (MPI_Request& r : ack_reqs_) MPI_Wait(&r, MPI_STATUS_IGNORE);
}

void FlightDumpExchange::serve_requests() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    MPI_Test(&incoming_req_, &flag, &status);
    if (!flag) return;
    incoming_.reason[sizeof incoming_.reason - 1] = '\0';
    FlightRecorder::instance().dump("requested by world rank " + std::to_string(status.MPI_SOURCE) +
                                    ": " + incoming_.reason);
    ack_bufs_.push_back(std::make_unique<int>(1));
    ack_reqs_.emplace_back();
    MPI_Isend(ack_bufs_.back().get(), 1, MPI_INT, status.MPI_SOURCE, kTagDumpAck, control_,
              &ack_reqs_.back());
    MPI_Irecv(&incoming_, sizeof incoming_, MPI_BYTE, MPI_ANY_SOURCE, kTagDump, control_,
              &incoming_req_);
  }
}

void FlightDumpExchange::dump_everywhere(const std::string& why,
                                         const std::function<void()>& meanwhile) {
  FlightRecorder& recorder = FlightRecorder::instance();
  if (!recorder.enabled()) return;
  recorder.dump("watchdog timeout on world rank " + std::to_string(world_rank_) + ": " + why);
  // The job ends right after: the buffers outstanding requests point into are never freed.
  auto* requests = new std::vector<Request>(world_size_);
  auto* acks = new std::vector<int>(world_size_);
  std::vector<MPI_Request> sends, receives;
  for (int r = 0; r < world_size_; ++r) {
    if (r == world_rank_) continue;
    std::snprintf((*requests)[r].reason, sizeof(Request::reason), "%s", why.c_str());
    receives.emplace_back();
    MPI_Irecv(&(*acks)[r], 1, MPI_INT, r, kTagDumpAck, control_, &receives.back());
    sends.emplace_back();
    MPI_Isend(&(*requests)[r], sizeof(Request), MPI_BYTE, r, kTagDump, control_, &sends.back());
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(kWaitSeconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    serve_requests();
    meanwhile();
    int all = 0;
    MPI_Testall(static_cast<int>(receives.size()), receives.data(), &all, MPI_STATUSES_IGNORE);
    if (all) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace tessera::comm::detail
