// Reading --dump-numerics directories (numerics/numerics_dump.h writes them) and finding the
// first place two runs part: tessera-compare --localize A B.
//
// Each run's parts are merged into whole-tensor records (sums of squares, sums, counts and
// checksums added, in rank order; maxima taken), keyed by (iteration, micro-batch, pass, layer,
// tensor), and walked in a fixed order: per iteration, the micro-batches' forwards (embedding,
// then layers up), their backwards (head gradient, then layers down), then the parameter
// gradients (a fault in a backward cannot reach a forward of the same iteration, so the first
// record that differs is where the runs part). Runs of the same layout are compared exactly (every
// figure and the checksum: bitwise-equal runs have equal records); runs of different layouts
// within a relative tolerance of the norm, the largest magnitude and the sum (the sum's
// difference against norm x sqrt(elements), so near-zero sums do not divide by zero); element
// counts are not compared then (layouts pad the vocabulary differently, with zero gradients).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace tessera::numerics {

struct NumericsRecord {
  double sum_sq = 0, max_abs = 0, sum = 0;
  int64_t count = 0;
  uint64_t checksum = 0;
  int parts = 0;
};

// (iteration, pass rank, micro-batch, layer order, tensor): pass rank 0 forward, 1 backward,
// 2 parameter gradients; layer order ascending in forward, descending in backward.
using NumericsKey = std::tuple<int64_t, int64_t, int, int64_t, std::string>;

struct NumericsRun {
  std::string layout;
  int world_size = 0;
  std::map<NumericsKey, NumericsRecord> records;
};

// Reads and merges every numerics.rank<R>.jsonl of `dir`. Throws tessera::Error naming the file
// and line on a missing directory, a missing rank file or a malformed line.
NumericsRun read_numerics(const std::string& dir);

struct Divergence {
  bool found = false;
  std::string where;   // "iteration 1, micro-batch (first sample) 0, backward, layer 1, input-grad"
  std::string detail;  // the figures of both runs
  int64_t compared = 0;
  bool exact = false;  // same layout: compared exactly
};

// The first record of `a` and `b` (in the order above) that differs: exactly when the layouts
// are equal, else beyond `rtol`. Records in one run only are skipped. Throws tessera::Error when
// the runs' micro-batch sizes differ (their micro-batches would hold different samples).
Divergence localize(const NumericsRun& a, const NumericsRun& b, double rtol);

}  // namespace tessera::numerics
