// What a layer needs to know about the micro-batch it is running, beyond its input tensor.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/philox.h"
#include "tessera/kernels/dropout.h"

namespace tessera::model {

struct StepContext {
  int64_t B = 0;                   // local micro-batch size
  int64_t T = 0;                   // local sequence length
  std::vector<int32_t> positions;  // (T) global position of each local token
  kernels::TokenCoords coords;     // global token ids, for dropout masks
  uint64_t seed = 0;               // run seed (--seed)
  int64_t iteration = 0;           // dropout masks differ per iteration
  bool training = true;            // dropout only when training
  int64_t N() const { return B * T; }

  // The Philox key of one dropout site: distinct per purpose, layer and iteration, identical on
  // every rank (so masks depend only on global coordinates).
  PhiloxKey dropout_key(RngPurpose purpose, int layer) const {
    return philox_key(seed, purpose, (static_cast<uint64_t>(iteration) << 24) ^ layer);
  }

  // A context for B samples of T tokens starting at global sample index `sample_offset`.
  static StepContext make(int64_t B, int64_t T, int64_t sample_offset, uint64_t seed,
                          int64_t iteration, bool training) {
    StepContext c;
    c.B = B;
    c.T = T;
    c.positions.resize(T);
    for (int64_t t = 0; t < T; ++t) c.positions[t] = static_cast<int32_t>(t);
    c.coords = {sample_offset, 0, T, T};
    c.seed = seed;
    c.iteration = iteration;
    c.training = training;
    return c;
  }
};

}  // namespace tessera::model
