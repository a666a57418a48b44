#include "tessera/pipeline/schedule.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "tessera/core/error.h"

namespace tessera::pipeline {

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::kOneFOneB;
  if (name == "interleaved") return ScheduleKind::kInterleaved;
  throw Error("--pipeline-schedule: unknown schedule '" + name +
              "' (expected gpipe, 1f1b or interleaved)");
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::kOneFOneB:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
  }
  return "?";
}

const char* action_name(Action a) {
  switch (a) {
    case Action::kRecvActivation:
      return "recv_activation";
    case Action::kForward:
      return "forward";
    case Action::kSendActivation:
      return "send_activation";
    case Action::kRecvGrad:
      return "recv_grad";
    case Action::kBackward:
      return "backward";
    case Action::kSendGrad:
      return "send_grad";
  }
  return "?";
}

void validate_schedule(ScheduleKind kind, const ScheduleShape& s) {
  if (s.pp_size < 1 || s.num_microbatches < 1 || s.virtual_stages < 1)
    throw Error("pipeline: sizes must be positive (pipeline size " + std::to_string(s.pp_size) +
                ", micro-batches " + std::to_string(s.num_microbatches) + ", virtual stages " +
                std::to_string(s.virtual_stages) + ")");
  if (kind != ScheduleKind::kInterleaved) {
    if (s.virtual_stages != 1)
      throw Error(std::string("--pipeline-schedule ") + schedule_name(kind) +
                  " runs one model chunk per rank; virtual stages need interleaved");
    return;
  }
  if (s.virtual_stages < 2 || s.pp_size < 2)
    throw Error(
        "--pipeline-schedule interleaved needs --pipeline-model-parallel-size >= 2 and "
        "at least 2 virtual stages per rank (--num-layers-per-virtual-pipeline-stage); "
        "got pipeline size " +
        std::to_string(s.pp_size) + ", " + std::to_string(s.virtual_stages) + " virtual stage(s)");
  if (s.num_microbatches % s.pp_size != 0)
    throw Error("the interleaved schedule needs the number of micro-batches per iteration (" +
                std::to_string(s.num_microbatches) +
                " = global batch / (micro batch x data parallel)) to be a multiple of "
                "--pipeline-model-parallel-size (" +
                std::to_string(s.pp_size) + ")");
}

namespace {

struct Compute {
  bool forward;
  int microbatch, chunk;
};

// The rank's forwards and backwards in order (the compute orders of schedule.h).
std::vector<Compute> compute_order(ScheduleKind kind, const ScheduleShape& s, int rank) {
  const int P = s.pp_size, M = s.num_microbatches, V = s.virtual_stages;
  const int total = M * V;
  auto forward_op = [&](int k) {
    if (kind != ScheduleKind::kInterleaved) return Compute{true, k, 0};
    return Compute{true, (k / (P * V)) * P + k % P, (k / P) % V};
  };
  auto backward_op = [&](int k) {
    if (kind != ScheduleKind::kInterleaved) return Compute{false, k, 0};
    return Compute{false, (k / (P * V)) * P + k % P, V - 1 - (k / P) % V};
  };
  int warmup = total;  // GPipe: every forward first
  if (kind == ScheduleKind::kOneFOneB) warmup = std::min(P - rank - 1, M);
  if (kind == ScheduleKind::kInterleaved)
    warmup = M == P ? total : std::min(2 * (P - rank - 1) + (V - 1) * P, total);
  std::vector<Compute> ops;
  for (int k = 0; k < warmup; ++k) ops.push_back(forward_op(k));
  for (int i = 0; i < total - warmup; ++i) {
    ops.push_back(forward_op(warmup + i));
    ops.push_back(backward_op(i));
  }
  for (int k = total - warmup; k < total; ++k) ops.push_back(backward_op(k));
  return ops;
}

}  // namespace

std::vector<Step> build_schedule(ScheduleKind kind, const ScheduleShape& s, int rank) {
  const int P = s.pp_size;
  const int last_model_chunk = s.virtual_stages * P - 1;
  const int next = (rank + 1) % P, prev = (rank + P - 1) % P;
  const std::vector<Compute> ops = compute_order(kind, s, rank);
  // The receive `op` waits for, if any.
  auto recv_of = [&](const Compute& op, Step* out) {
    const int j = model_chunk(s, rank, op.chunk);
    if (op.forward && j > 0) {
      *out = {Action::kRecvActivation, op.microbatch, op.chunk, prev};
      return true;
    }
    if (!op.forward && j < last_model_chunk) {
      *out = {Action::kRecvGrad, op.microbatch, op.chunk, next};
      return true;
    }
    return false;
  };
  std::vector<Step> steps;
  Step recv;
  if (!ops.empty() && recv_of(ops[0], &recv)) steps.push_back(recv);
  for (size_t i = 0; i < ops.size(); ++i) {
    const Compute& op = ops[i];
    if (i + 1 < ops.size() && recv_of(ops[i + 1], &recv)) steps.push_back(recv);
    const int j = model_chunk(s, rank, op.chunk);
    if (op.forward) {
      steps.push_back({Action::kForward, op.microbatch, op.chunk});
      if (j < last_model_chunk)
        steps.push_back({Action::kSendActivation, op.microbatch, op.chunk, next});
    } else {
      steps.push_back({Action::kBackward, op.microbatch, op.chunk});
      if (j > 0) steps.push_back({Action::kSendGrad, op.microbatch, op.chunk, prev});
    }
  }
  return steps;
}

double Simulation::bubble_fraction() const {
  if (idle.empty() || makespan <= 0) return 0;
  double sum = 0;
  for (double i : idle) sum += i;
  return sum / static_cast<double>(idle.size()) / makespan;
}

Simulation simulate(const ScheduleShape& s, const std::vector<std::vector<Step>>& lists,
                    double forward_time, double backward_time) {
  OperationTimes times;
  times.compute = [&](int, int, bool forward) { return forward ? forward_time : backward_time; };
  return simulate(s, lists, times);
}

Simulation simulate(const ScheduleShape& s, const std::vector<std::vector<Step>>& lists,
                    const OperationTimes& times) {
  const int P = s.pp_size;
  Simulation sim;
  sim.idle.assign(P, 0.0);
  sim.peak_in_flight.assign(P, 0);
  // A message is named by (is gradient, micro-batch, receiving model chunk); the value is the
  // time it was sent.
  using Key = std::tuple<bool, int, int>;
  std::map<Key, double> sent;
  std::map<Key, int> sends_of, recvs_of;
  std::map<Key, std::pair<int, int>> route;   // key -> (sender, the rank the sender sent to)
  std::map<Key, std::pair<int, int>> posted;  // key -> (receiver, the rank it receives from)
  std::vector<size_t> at(P, 0);
  std::vector<double> clock(P, 0.0), busy(P, 0.0);
  std::vector<int> in_flight(P, 0);
  // The message a step sends or waits for.
  auto key_of = [&](int rank, const Step& st) -> Key {
    const int j = model_chunk(s, rank, st.chunk);
    switch (st.action) {
      case Action::kSendActivation:
        return {false, st.microbatch, j + 1};
      case Action::kRecvActivation:
      case Action::kForward:
        return {false, st.microbatch, j};
      case Action::kSendGrad:
        return {true, st.microbatch, j - 1};
      case Action::kRecvGrad:
      case Action::kBackward:
        return {true, st.microbatch, j};
    }
    return {};
  };
  const int last_model_chunk = s.virtual_stages * P - 1;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < P; ++r) {
      while (at[r] < lists[r].size()) {
        const Step& st = lists[r][at[r]];
        const Key key = key_of(r, st);
        if (st.action == Action::kSendActivation || st.action == Action::kSendGrad) {
          sent[key] = clock[r] + times.transfer;
          ++sends_of[key];
          route[key] = {r, st.peer};
        } else if (st.action == Action::kRecvActivation || st.action == Action::kRecvGrad) {
          ++recvs_of[key];
          posted[key] = {r, st.peer};
        } else {
          const int j = model_chunk(s, r, st.chunk);
          const bool forward = st.action == Action::kForward;
          const bool needs_input = forward ? j > 0 : j < last_model_chunk;
          double ready = clock[r];
          if (needs_input) {
            auto it = sent.find(key);
            if (it == sent.end()) break;  // blocked until the peer sends
            ready = std::max(ready, it->second);
          }
          const double t = times.compute(r, st.chunk, forward);
          clock[r] = ready + t;
          busy[r] += t;
          in_flight[r] += forward ? 1 : -1;
          sim.peak_in_flight[r] = std::max(sim.peak_in_flight[r], in_flight[r]);
        }
        ++at[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < P; ++r) {
    if (at[r] < lists[r].size()) {
      const Step& st = lists[r][at[r]];
      sim.deadlock = true;
      sim.problem = "rank " + std::to_string(r) + " waits forever at step " +
                    std::to_string(at[r]) + " (" + action_name(st.action) + " micro-batch " +
                    std::to_string(st.microbatch) + " chunk " + std::to_string(st.chunk) + ")";
      return sim;
    }
  }
  for (const auto& [key, n] : sends_of) {
    auto it = recvs_of.find(key);
    if (n != 1 || it == recvs_of.end() || it->second != 1) {
      sim.deadlock = true;
      sim.problem = "a message (gradient " + std::to_string(std::get<0>(key)) + ", micro-batch " +
                    std::to_string(std::get<1>(key)) + ", model chunk " +
                    std::to_string(std::get<2>(key)) + ") is sent " + std::to_string(n) +
                    " time(s) and received " +
                    std::to_string(it == recvs_of.end() ? 0 : it->second) + " time(s)";
      return sim;
    }
  }
  for (const auto& [key, from_to] : route) {
    const auto& [receiver, expected_sender] = posted.at(key);
    if (from_to.second != receiver || expected_sender != from_to.first) {
      sim.deadlock = true;
      sim.problem = "micro-batch " + std::to_string(std::get<1>(key)) + ": rank " +
                    std::to_string(from_to.first) + " sends to rank " +
                    std::to_string(from_to.second) + " but rank " + std::to_string(receiver) +
                    " receives it from rank " + std::to_string(expected_sender);
      return sim;
    }
  }
  if (recvs_of.size() != sends_of.size()) {
    sim.deadlock = true;
    sim.problem = "a receive has no matching send";
    return sim;
  }
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  for (int r = 0; r < P; ++r) sim.idle[r] = sim.makespan - busy[r];
  sim.finish = clock;
  sim.busy = busy;
  return sim;
}

double theoretical_bubble(const ScheduleShape& s) {
  const double P = s.pp_size, M = s.num_microbatches, V = s.virtual_stages;
  return (P - 1) / (V * M + P - 1);
}

}  // namespace tessera::pipeline
