// Runtime::watchdog_loop (contract in runtime.h): times the running task; on a timeout asks the
// task's group members over the control communicator how far they got, prints one verdict and
// ends the job (with the flight recorder on, after every reachable rank dumped); answers other
// ranks' questions. Apart from runtime.cc because it is a concern of its own: a protocol on a
// communicator of its own, between ranks that may be stuck.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tessera/comm/flight_recorder.h"
#include "tessera/comm/flight_report.h"
#include "tessera/comm/runtime.h"
#include "tessera/core/clock.h"

namespace tessera::comm::detail {
namespace {
// Control-channel messages (fixed size, sent as bytes between identical binaries).
constexpr int kTagQuery = 101;
constexpr int kTagReply = 102;

struct QueryMsg {
  uint64_t group_id;
  int64_t seq;
};
struct ReplyMsg {
  uint64_t group_id;
  int64_t started;  // collectives of that group this rank has started; -1: unknown group
  int32_t busy;     // 1 if its communication thread is inside an operation
  char doing[228];  // what its communication thread is doing right now
};

void copy_str(char* dst, size_t cap, const std::string& s) {
  size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

}  // namespace

namespace {

// One investigation of a timed-out operation: queries sent, replies awaited.
struct Investigation {
  bool active = false;
  uint64_t token = 0;
  TaskInfo info;
  double elapsed = 0;
  Clock::time_point deadline;
  std::vector<int> targets;  // world ranks asked
  std::vector<QueryMsg> queries;
  std::vector<ReplyMsg> replies;
  std::vector<MPI_Request> send_reqs, recv_reqs;
  std::vector<bool> answered;
};

}  // namespace

void Runtime::watchdog_loop() {
  QueryMsg incoming{};
  MPI_Request query_req;
  MPI_Irecv(&incoming, sizeof incoming, MPI_BYTE, MPI_ANY_SOURCE, kTagQuery, control_comm_,
            &query_req);
  std::vector<std::unique_ptr<ReplyMsg>> reply_bufs;
  std::vector<MPI_Request> reply_reqs;
  Investigation inv;
  bool verdict_given = false;
  Clock::time_point self_abort_at;
  std::string verdict;

  auto doing_now = [this]() {
    std::lock_guard<std::mutex> lock(current_mu_);
    if (current_running_) {
      return "running " + current_info_.describe() + " on group '" + current_info_.group->name +
             "' for " + std::to_string(static_cast<int>(seconds_since(current_start_))) + " s";
    }
    if (!pending_infos_.empty()) {
      const auto& p = pending_infos_.front();
      return "waiting for " + p.info.describe() + " on group '" + p.info.group->name + "'";
    }
    return std::string("idle");
  };

  // Answer other ranks' queries (and complete the replies sent).
  auto answer_queries = [&] {
    for (;;) {
      int flag = 0;
      MPI_Status status;
      MPI_Test(&query_req, &flag, &status);
      if (!flag) break;
      auto reply = std::make_unique<ReplyMsg>();
      reply->group_id = incoming.group_id;
      reply->started = -1;
      {
        std::lock_guard<std::mutex> lock(groups_mu_);
        auto it = groups_.find(incoming.group_id);
        if (it != groups_.end()) reply->started = it->second->started.load();
      }
      const std::string doing = doing_now();
      reply->busy = doing != "idle";
      copy_str(reply->doing, sizeof reply->doing, doing);
      MPI_Request r;
      MPI_Isend(reply.get(), sizeof(ReplyMsg), MPI_BYTE, status.MPI_SOURCE, kTagReply,
                control_comm_, &r);
      reply_bufs.push_back(std::move(reply));
      reply_reqs.push_back(r);
      MPI_Irecv(&incoming, sizeof incoming, MPI_BYTE, MPI_ANY_SOURCE, kTagQuery, control_comm_,
                &query_req);
    }
    for (size_t i = 0; i < reply_reqs.size();) {
      int flag = 0;
      MPI_Test(&reply_reqs[i], &flag, MPI_STATUS_IGNORE);
      if (flag) {
        reply_reqs.erase(reply_reqs.begin() + i);
        reply_bufs.erase(reply_bufs.begin() + i);
      } else {
        ++i;
      }
    }
  };

  FlightDumpExchange dumps(control_comm_, world_rank_, world_size_);
  auto end_with_verdict = [&] {
    if (FlightRecorder::instance().enabled())
      verdict += " Flight recorder dumps in " + FlightRecorder::instance().dir() +
                 " (read them with tessera-flight).";
    dumps.dump_everywhere(verdict, answer_queries);
    std::fprintf(stderr, "%s\n", verdict.c_str());
    end_job(kWatchdogExitCode);
  };

  while (!stop_watchdog_.load()) {
    dumps.serve_requests();
    answer_queries();

    const double timeout = timeout_seconds.load();
    if (!inv.active && !verdict_given) {
      // The running task, else the oldest point-to-point transfer still in flight.
      std::lock_guard<std::mutex> lock(current_mu_);
      const TaskInfo* info = nullptr;
      double elapsed = 0;
      uint64_t token = 0;
      if (current_running_) {
        info = &current_info_;
        elapsed = seconds_since(current_start_);
        token = current_token_;
      } else if (!pending_infos_.empty()) {
        info = &pending_infos_.front().info;
        elapsed = seconds_since(pending_infos_.front().start);
        token = pending_infos_.front().token;
      }
      if (info && elapsed > timeout) {
        inv = Investigation{};
        inv.active = true;
        inv.token = token;
        inv.info = *info;
        inv.elapsed = elapsed;
      }
      if (inv.active) {
        if (inv.info.seq > 0) {
          for (int r : inv.info.group->members) {
            if (r != world_rank_) inv.targets.push_back(r);
          }
        } else if (inv.info.peer_world >= 0) {
          inv.targets.push_back(inv.info.peer_world);
        }
        const size_t n = inv.targets.size();
        inv.queries.assign(n, QueryMsg{inv.info.group->id, inv.info.seq});
        inv.replies.assign(n, ReplyMsg{});
        inv.send_reqs.assign(n, MPI_REQUEST_NULL);
        inv.recv_reqs.assign(n, MPI_REQUEST_NULL);
        inv.answered.assign(n, false);
        for (size_t i = 0; i < n; ++i) {
          MPI_Irecv(&inv.replies[i], sizeof(ReplyMsg), MPI_BYTE, inv.targets[i], kTagReply,
                    control_comm_, &inv.recv_reqs[i]);
          MPI_Isend(&inv.queries[i], sizeof(QueryMsg), MPI_BYTE, inv.targets[i], kTagQuery,
                    control_comm_, &inv.send_reqs[i]);
        }
        // Peers answer within one poll interval (<= 100 ms) unless dead or wedged.
        inv.deadline = Clock::now() + std::chrono::milliseconds(
                                          static_cast<int>(1000 * std::clamp(timeout, 1.0, 5.0)));
      }
    }

    if (inv.active) {
      bool all = true;
      for (size_t i = 0; i < inv.targets.size(); ++i) {
        if (!inv.answered[i]) {
          int flag = 0;
          MPI_Test(&inv.recv_reqs[i], &flag, MPI_STATUS_IGNORE);
          inv.answered[i] = flag != 0;
        }
        all = all && inv.answered[i];
      }
      if (all || Clock::now() > inv.deadline) {
        inv.active = false;
        verdict_given = true;
        // Who did not arrive: a member that has not started this collective (or, for a
        // point-to-point transfer, the peer), or that did not answer at all.
        std::string missing;
        int printer = world_rank_;
        bool missing_rank_busy = false;
        for (size_t i = 0; i < inv.targets.size(); ++i) {
          const int r = inv.targets[i];
          std::string what;
          if (!inv.answered[i]) {
            what = "no answer: dead or unresponsive";
          } else if (inv.info.seq > 0 && inv.replies[i].started >= inv.info.seq) {
            printer = std::min(printer, r);  // arrived
            continue;
          } else {
            inv.replies[i].doing[sizeof(inv.replies[i].doing) - 1] = '\0';
            missing_rank_busy = missing_rank_busy || inv.replies[i].busy != 0;
            what = (inv.info.seq > 0 ? "started " + std::to_string(inv.replies[i].started) +
                                           " collectives on this group, now "
                                     : std::string("now ")) +
                   inv.replies[i].doing;
          }
          missing += (missing.empty() ? "" : "; ") + std::string("world rank ") +
                     std::to_string(r) + " (" + what + ")";
        }
        if (missing.empty()) {
          missing = "none (every member arrived: the transfer itself is stuck)";
        }
        verdict = "tessera watchdog: " + inv.info.describe() + " on group '" +
                  inv.info.group->name + "' (world ranks " + rank_list(inv.info.group->members) +
                  ") did not complete within " + std::to_string(static_cast<int>(timeout)) +
                  " s on world rank " + std::to_string(world_rank_) +
                  "; ranks that did not arrive: " + missing + ". Aborting the job.";
        // Cancel what is still outstanding so MPI does not write into inv later.
        for (size_t i = 0; i < inv.targets.size(); ++i) {
          if (!inv.answered[i]) {
            MPI_Cancel(&inv.recv_reqs[i]);
            MPI_Request_free(&inv.recv_reqs[i]);
          }
          MPI_Request_free(&inv.send_reqs[i]);
        }
        // The lowest arrived rank speaks for everyone; the others give it a moment to take the
        // job down, then abort themselves (so a lost message can never leave the job hanging).
        // If a missing rank is itself inside another operation, its own watchdog will report
        // what it waits for, which is closer to the cause: give it that moment too.
        const bool still_same = [&] {
          std::lock_guard<std::mutex> lock(current_mu_);
          if (current_running_ && current_token_ == inv.token) return true;
          for (const auto& p : pending_infos_) {
            if (p.token == inv.token) return true;
          }
          return false;
        }();
        if (!still_same) {
          verdict_given = false;  // it completed meanwhile: nothing to report
        } else if (printer == world_rank_ && !missing_rank_busy) {
          end_with_verdict();
        } else {
          // Longer than the speaker's wait for the flight-recorder dumps, so one verdict ends
          // the job even when a rank is dead.
          self_abort_at = Clock::now() + std::chrono::seconds(5) +
                          std::chrono::milliseconds(
                              static_cast<int>(FlightRecorder::instance().enabled()
                                                   ? 1000 * (FlightDumpExchange::kWaitSeconds + 2)
                                                   : 0));
        }
      }
    }
    if (verdict_given && Clock::now() > self_abort_at) end_with_verdict();
    const double poll = std::clamp(timeout / 20, 0.001, 0.1);
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(poll * 1e6)));
  }
  MPI_Cancel(&query_req);
  MPI_Wait(&query_req, MPI_STATUS_IGNORE);
  for (auto& r : reply_reqs) MPI_Wait(&r, MPI_STATUS_IGNORE);
}

}  // namespace tessera::comm::detail
