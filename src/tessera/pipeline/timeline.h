// A per-rank record of what one iteration spent its time on (forward, backward, waiting for a
// send or receive, the gradient reduction, the optimizer step), written by every rank together
// as one Chrome trace (chrome://tracing, https://ui.perfetto.dev): one process per rank, one row
// per phase kind. The same timers, summed per phase, give the log's wall-clock breakdown.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"

namespace tessera::pipeline {

class Timeline {
 public:
  enum class Phase { kForward, kBackward, kSend, kRecv, kOptimizer, kGradSync, kCount };
  static const char* phase_name(Phase p);

  struct Event {
    Phase phase;
    int microbatch, chunk;  // -1 when it belongs to no micro-batch
    double start, end;      // seconds since the origin
  };

  // Starts recording: the origin is now. Ranks call it right after a barrier, so their origins
  // agree to within the barrier's exit skew (and steady_clock is system-wide on one machine).
  void start();
  bool recording() const { return recording_; }
  // Phase totals (seconds per phase since the timeline was made) are kept whenever this is on,
  // with or without recording events: the cheap timers behind the log's wall-clock breakdown,
  // the straggler report and TensorBoard's timers (each reads them through a PhaseWindow).
  void keep_totals(bool on) { totals_on_ = on; }
  bool timing() const { return recording_ || totals_on_; }
  double total(Phase p) const { return totals_[static_cast<int>(p)]; }
  double now() const;
  void add(Phase phase, int microbatch, int chunk, double start, double end);
  void stop() { recording_ = false; }

  // Gathers every rank's events over `world` (nullptr: this process only) and has world rank 0
  // write the trace to `path`; `pp_rank_of[r]` labels rank r (stage 0 past its end). Collective.
  // tessera::Error when the file cannot be written. Returns, on world rank 0 (empty elsewhere),
  // each rank's idle share of the pipeline phase: 1 - (its forward + backward time) / (the time
  // from the origin to the end of the last forward or backward on any rank).
  std::vector<double> write_chrome_trace(const std::string& path, comm::ProcessGroup* world,
                                         const std::vector<int>& pp_rank_of) const;

 private:
  bool recording_ = false, totals_on_ = false;
  std::array<double, static_cast<int>(Phase::kCount)> totals_{};
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  std::vector<Event> events_;
};

// The seconds per phase a timeline added since the previous take(): one reader's window over the
// never-reset totals, so readers reporting at different intervals do not disturb each other.
class PhaseWindow {
 public:
  static constexpr int kPhases = static_cast<int>(Timeline::Phase::kCount);
  std::array<double, kPhases> take(const Timeline& t) {
    std::array<double, kPhases> since{};
    for (int p = 0; p < kPhases; ++p) {
      const double total = t.total(static_cast<Timeline::Phase>(p));
      since[p] = total - last_[p];
      last_[p] = total;
    }
    return since;
  }

 private:
  std::array<double, kPhases> last_{};
};

// Times a scope into a timeline (when it records).
class TimelineScope {
 public:
  TimelineScope(Timeline* t, Timeline::Phase phase, int microbatch = -1, int chunk = -1)
      : t_(t && t->timing() ? t : nullptr),
        phase_(phase),
        mb_(microbatch),
        chunk_(chunk),
        start_(t_ ? t_->now() : 0.0) {}
  ~TimelineScope() {
    if (t_) t_->add(phase_, mb_, chunk_, start_, t_->now());
  }
  TimelineScope(const TimelineScope&) = delete;
  TimelineScope& operator=(const TimelineScope&) = delete;

 private:
  Timeline* t_;
  Timeline::Phase phase_;
  int mb_, chunk_;
  double start_;
};

}  // namespace tessera::pipeline
