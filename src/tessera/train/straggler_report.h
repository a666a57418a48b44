// --log-straggler (Megatron's flag): after each log line, which rank is slow. Every rank
// contributes its iteration time and its time per phase (forward, backward, pipeline send and
// receive, the gradient reduction, the optimizer step; pipeline::Timeline's totals) averaged
// over the iterations since the previous report; rank 0 prints each figure's minimum and maximum
// over the ranks with the rank that had it, and names the rank with the most compute time
// (forward + backward + optimizer, less the time inside the model's tensor-parallel collectives
// and the MoE token exchange, which run within forward and backward; not subtracted, so counted
// as compute: an MoE block's own TP all-reduces and its expert-TP-1 sums, context-parallel
// attention transfers and ZeRO 3 gathers). Compute, not iteration time,
// identifies the straggler: the synchronous collectives make every rank's iteration as long as
// the slowest one's, the others' extra time showing up as waiting (receive, gradient reduction,
// a TP partner's all-reduce).
#pragma once

#include <string>

#include "tessera/comm/process_group.h"
#include "tessera/pipeline/timeline.h"

namespace tessera::train {

class StragglerReport {
 public:
  static constexpr int kPhases = pipeline::PhaseWindow::kPhases;

  // One line per report: " straggler (ms per iteration over N ranks) | iteration min A (rank r)
  // max B (rank q) | forward ... | ... | slowest: rank q, compute C ms, +P% over the fastest".
  struct Result {
    std::string line;
    int slowest_rank = 0;
  };

  // `world` may be nullptr (one process).
  explicit StragglerReport(comm::ProcessGroup* world) : world_(world) {}
  // After each training iteration, its wall time on this rank.
  void add_iteration(double seconds) {
    iteration_seconds_ += seconds;
    ++iterations_;
  }
  // Collective over the world: the report for the iterations since the previous one (from the
  // timeline's phase totals, through a window of its own, and `collective_seconds`,
  // this rank's cumulative time inside the collectives within forward and backward). The same
  // on every rank.
  Result report(const pipeline::Timeline& timeline, double collective_seconds);

 private:
  comm::ProcessGroup* world_;
  double iteration_seconds_ = 0;
  int64_t iterations_ = 0;
  pipeline::PhaseWindow window_;
  double last_collective_ = 0;
};

}  // namespace tessera::train
