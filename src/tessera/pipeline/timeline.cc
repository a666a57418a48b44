#include "tessera/pipeline/timeline.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/core/clock.h"
#include "tessera/core/error.h"

namespace tessera::pipeline {

const char* Timeline::phase_name(Phase p) {
  switch (p) {
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kSend:
      return "send";
    case Phase::kRecv:
      return "recv";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kGradSync:
      return "grad_sync";
    case Phase::kCount:
      break;
  }
  return "?";
}

void Timeline::start() {
  events_.clear();
  origin_ = std::chrono::steady_clock::now();
  recording_ = true;
}

double Timeline::now() const {
  return seconds_since(origin_);
}

void Timeline::add(Phase phase, int microbatch, int chunk, double start, double end) {
  totals_[static_cast<int>(phase)] += end - start;
  if (recording_) events_.push_back({phase, microbatch, chunk, start, end});
}

std::vector<double> Timeline::write_chrome_trace(const std::string& path, comm::ProcessGroup* world,
                                                 const std::vector<int>& pp_rank_of) const {
  // Five int64 per event: phase, micro-batch, chunk, start and end in nanoseconds.
  constexpr int kFields = 5;
  const int n = world ? world->size() : 1;
  Tensor count = Tensor::empty({1}, DType::kI64);
  count.data<int64_t>()[0] = static_cast<int64_t>(events_.size());
  Tensor counts = Tensor::empty({n}, DType::kI64);
  if (world) {
    world->all_gather(count, counts).wait();
  } else {
    counts.data<int64_t>()[0] = count.data<int64_t>()[0];
  }
  int64_t most = 1;
  for (int r = 0; r < n; ++r) most = std::max(most, counts.data<int64_t>()[r]);
  Tensor mine = Tensor::zeros({most * kFields}, DType::kI64);
  int64_t* m = mine.data<int64_t>();
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    m[i * kFields + 0] = static_cast<int64_t>(e.phase);
    m[i * kFields + 1] = e.microbatch;
    m[i * kFields + 2] = e.chunk;
    m[i * kFields + 3] = static_cast<int64_t>(e.start * 1e9);
    m[i * kFields + 4] = static_cast<int64_t>(e.end * 1e9);
  }
  Tensor all = Tensor::empty({n * most * kFields}, DType::kI64);
  if (world) {
    world->all_gather(mine, all).wait();
  } else {
    all = mine;
  }
  if (world && world->rank() != 0) return {};
  nlohmann::json trace = nlohmann::json::array();
  std::vector<double> busy(n, 0.0);
  double span = 0;
  for (int r = 0; r < n; ++r) {
    const int pp = r < static_cast<int>(pp_rank_of.size()) ? pp_rank_of[r] : 0;
    trace.push_back({{"name", "process_name"},
                     {"ph", "M"},
                     {"pid", r},
                     {"args",
                      {{"name", "rank " + std::to_string(r) + " (pipeline stage " +
                                    std::to_string(pp) + ")"}}}});
    const int64_t* ev = all.data<int64_t>() + r * most * kFields;
    for (int64_t i = 0; i < counts.data<int64_t>()[r]; ++i, ev += kFields) {
      const auto phase = static_cast<Phase>(ev[0]);
      if (phase == Phase::kForward || phase == Phase::kBackward) {
        busy[r] += static_cast<double>(ev[4] - ev[3]) / 1e9;
        span = std::max(span, static_cast<double>(ev[4]) / 1e9);
      }
      std::string name = phase_name(phase);
      if (ev[1] >= 0) name += " mb" + std::to_string(ev[1]);
      if (ev[2] > 0) name += " chunk" + std::to_string(ev[2]);
      trace.push_back({{"name", name},
                       {"cat", phase_name(phase)},
                       {"ph", "X"},
                       {"pid", r},
                       {"tid", static_cast<int>(phase)},
                       {"ts", static_cast<double>(ev[3]) / 1e3},
                       {"dur", static_cast<double>(ev[4] - ev[3]) / 1e3},
                       {"args", {{"microbatch", ev[1]}, {"chunk", ev[2]}}}});
    }
  }
  std::ofstream out(path);
  if (!out) throw Error("--timeline-file " + path + ": cannot write there");
  out << nlohmann::json{{"traceEvents", trace}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  std::vector<double> idle(n, 0.0);
  for (int r = 0; r < n; ++r) idle[r] = span > 0 ? 1.0 - busy[r] / span : 0.0;
  return idle;
}

}  // namespace tessera::pipeline
