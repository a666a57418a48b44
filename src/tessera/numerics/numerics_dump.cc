#include "tessera/numerics/numerics_dump.h"

#include <xxhash.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera::numerics {
namespace {

// Elements per partial sum: chunks are summed by the threads and combined in chunk order, so
// the figures do not depend on the thread count (runs of one layout compare exactly).
constexpr int64_t kChunk = int64_t{1} << 16;

template <typename T>
void accumulate(const T* x, int64_t n, double& sum_sq, double& max_abs, double& sum) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> sq(chunks), su(chunks), mx(chunks);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    double s2 = 0, s1 = 0, m = 0;
    for (int64_t i = c * kChunk, end = std::min(n, (c + 1) * kChunk); i < end; ++i) {
      const double v = to_f32(x[i]);
      s2 += v * v;
      s1 += v;
      m = std::max(m, std::fabs(v));
    }
    sq[c] = s2;
    su[c] = s1;
    mx[c] = m;
  }
  for (int64_t c = 0; c < chunks; ++c) {
    sum_sq += sq[c];
    sum += su[c];
    max_abs = std::max(max_abs, mx[c]);
  }
}

}  // namespace

NumericsDump::NumericsDump(NumericsDumpOptions options) : options_(std::move(options)) {
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  const std::string path =
      options_.dir + "/numerics.rank" + std::to_string(options_.world_rank) + ".jsonl";
  file_.open(path, std::ios::trunc);
  if (!file_) throw Error("--dump-numerics " + options_.dir + ": cannot write " + path);
  nlohmann::ordered_json header = {{"format", "tessera-numerics-1"},
                                   {"rank", options_.world_rank},
                                   {"world_size", options_.world_size},
                                   {"layout", options_.layout}};
  file_ << header.dump() << "\n";
}

void NumericsDump::record(const char* pass, int64_t micro_batch, int layer,
                          const std::string& tensor, const void* data, DType dtype, int64_t count) {
  const auto t0 = std::chrono::steady_clock::now();
  double sum_sq = 0, max_abs = 0, sum = 0;
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    accumulate(static_cast<const T*>(data), count, sum_sq, max_abs, sum);
  });
  char checksum[17];
  std::snprintf(checksum, sizeof checksum, "%016" PRIx64,
                static_cast<uint64_t>(XXH3_64bits(data, count * dtype_size(dtype))));
  nlohmann::ordered_json j = {{"it", iteration_},    {"mb", micro_batch}, {"pass", pass},
                              {"layer", layer},      {"tensor", tensor},  {"sum_sq", sum_sq},
                              {"max_abs", max_abs},  {"sum", sum},        {"count", count},
                              {"checksum", checksum}};
  file_ << j.dump() << "\n";
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void NumericsDump::forward_output(int layer, const Tensor& x, const model::StepContext& ctx) {
  if (!options_.writes_rows) return;
  record("forward", ctx.coords.sample_offset, layer, layer < 0 ? "embedding" : "output", x.raw(),
         x.dtype(), x.numel());
}

void NumericsDump::backward_input_grad(int layer, Tensor& dx, const model::StepContext& ctx) {
  if (!options_.writes_rows) return;
  if (layer == options_.fault_layer && options_.plants_fault && !fault_planted_ &&
      ctx.coords.sample_offset == 0 && dx.numel() > 0) {
    fault_planted_ = true;
    visit_float(dx.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* d = dx.data<T>();
      // One ulp up: the next representable value of the element's own type.
      const float v = to_f32(d[0]);
      T next = from_f32<T>(v);
      for (float step = std::nextafter(v, INFINITY); to_f32(next) == v;
           step = std::nextafter(step, INFINITY))
        next = from_f32<T>(step);
      d[0] = next;
    });
  }
  record("backward", ctx.coords.sample_offset, layer,
         layer == options_.num_layers ? "head input-grad" : "input-grad", dx.raw(), dx.dtype(),
         dx.numel());
}

void NumericsDump::parameter_grads(model::ParameterSet& params,
                                   const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  const float* grads = params.flat_grads().data<float>();
  // A parameter's elements in the ranges, as one part per run (usually one).
  params.for_each_run(ranges, [&](const model::Parameter& p, int64_t lo, int64_t hi, size_t) {
    record("grads", -1, -1, p.name, grads + lo, DType::kF32, hi - lo);
  });
}

void NumericsDump::end_iteration() { file_.flush(); }

}  // namespace tessera::numerics
