// model_step: forward + backward of one micro-batch for GPT-2 124M and a LLaMA shape of similar
// size, in fp32 and bf16, printing tokens/s, achieved GFLOP/s by Megatron's FLOPs formula
// (train/flops.h, docs/performance.md; LM head included) and the fraction of the GEMM peak
// measured in the same run on the same machine, and how much of a step its GEMMs take. The fp32
// and bf16 steps of a model alternate, so the bf16/fp32 ratio compares steps taken under the same
// load of a shared machine.
//
// Usage: build/bin/model_step [--threads N] [--steps S] [--model gpt2|llama|all] [--dtype fp32|bf16|all]
//                             [--bf16-gemm onednn|packed|widen]  (default: the path gemm.h chooses)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_models.h"
#include "flag_pairs.h"
#include "tessera/core/threads.h"
#include "tessera/kernels/build_info.h"
#include "tessera/kernels/gemm.h"
#include "tessera/model/gpt_model.h"
#include "tessera/train/flops.h"

namespace {

using tessera::DType;
using tessera::model::ModelConfig;

struct Shape {
  const char* name;
  ModelConfig cfg;
};

// Forward+backward step times of cfg in each dtype, the dtypes' steps interleaved: the median
// step, and the median of the time each step spends inside gemm (kernels::gemm_seconds) and
// outside it.
struct StepTimes {
  std::vector<double> step_seconds, gemm_seconds, rest_seconds;
};
StepTimes run(const ModelConfig& cfg, const std::vector<DType>& dtypes, int64_t B, int steps) {
  std::vector<std::unique_ptr<tessera::model::GPTModel>> models;
  std::vector<std::function<void(int)>> variants;
  std::vector<std::vector<double>> gemm(dtypes.size()), rest(dtypes.size());
  const tessera::bench::BenchBatch data(cfg, B);
  for (DType dtype : dtypes) {
    models.push_back(std::make_unique<tessera::model::GPTModel>(cfg, dtype, 1234));
    tessera::model::GPTModel* model = models.back().get();
    const size_t v = variants.size();
    variants.push_back([model, &cfg, &data, B, &gemm, &rest, v](int s) {
      const auto ctx = model->context(B, cfg.seq_length, s * B, 1, s + 1, true);
      const double gemm_before = tessera::kernels::gemm_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      model->forward_backward(data.batch, ctx, 1.0f / (B * cfg.seq_length));
      const double step = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double in_gemm = tessera::kernels::gemm_seconds() - gemm_before;
      if (s > 0) {
        gemm[v].push_back(in_gemm);
        rest[v].push_back(step - in_gemm);
      }
    });
  }
  StepTimes times;
  times.step_seconds = tessera::bench::interleaved_median_step_seconds(steps, variants);
  const auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  for (size_t v = 0; v < dtypes.size(); ++v) {
    times.gemm_seconds.push_back(median(gemm[v]));
    times.rest_seconds.push_back(median(rest[v]));
  }
  return times;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, steps = 5;
  std::string which = "all", dtypes = "all", bf16_gemm;
  tessera::bench::require_flag_pairs(argc, argv, "model_step");
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--model")) which = argv[i + 1];
    else if (!std::strcmp(argv[i], "--dtype")) dtypes = argv[i + 1];
    else if (!std::strcmp(argv[i], "--bf16-gemm")) bf16_gemm = argv[i + 1];
    else {
      std::fprintf(stderr, "model_step: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  tessera::set_num_threads(threads);
  if (bf16_gemm == "onednn") {
    tessera::kernels::set_bf16_gemm_path(tessera::kernels::Bf16GemmPath::kOneDnnBf16);
  } else if (bf16_gemm == "packed") {
    tessera::kernels::set_bf16_gemm_path(tessera::kernels::Bf16GemmPath::kPacked);
  } else if (bf16_gemm == "widen") {
    tessera::kernels::set_bf16_gemm_path(tessera::kernels::Bf16GemmPath::kWidenToFp32);
  } else if (!bf16_gemm.empty()) {
    std::fprintf(stderr, "model_step: --bf16-gemm takes onednn, packed or widen, got %s\n", bf16_gemm.c_str());
    return 2;
  }
  const int64_t B = 4;
  std::printf("%s\n", tessera::kernels::version_line().c_str());
  std::printf("model_step: forward+backward of one micro-batch (B=%lld, T=256), %d threads, "
              "median of %d steps\n", static_cast<long long>(B), threads, steps);
  const double peak_f32 = tessera::kernels::measure_peak_gflops(DType::kF32);
  const double peak_bf16 = tessera::kernels::measure_peak_gflops(DType::kBF16);
  std::printf("GEMM peak measured now (2048^3): fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n", peak_f32,
              peak_bf16);
  std::vector<Shape> shapes;
  if (which == "all" || which == "gpt2") shapes.push_back({"gpt2-124m", tessera::bench::gpt2_124m()});
  if (which == "all" || which == "llama") shapes.push_back({"llama-124m", tessera::bench::llama_124m()});
  std::printf("%-11s %-5s %10s %11s %10s %12s %14s %10s %10s\n", "model", "dtype", "step (ms)",
              "tokens/s", "GFLOP/s", "of fp32 peak", "of dtype peak", "GEMM (ms)", "rest (ms)");
  std::vector<DType> dtypes_run;
  for (DType dtype : {DType::kF32, DType::kBF16})
    if (dtypes == "all" || dtypes == tessera::dtype_name(dtype)) dtypes_run.push_back(dtype);
  for (const Shape& s : shapes) {
    const StepTimes times = run(s.cfg, dtypes_run, B, steps);
    double f32_tps = 0;
    for (size_t i = 0; i < dtypes_run.size(); ++i) {
      const DType dtype = dtypes_run[i];
      const double dt = times.step_seconds[i];
      const int64_t padded = s.cfg.padded_vocab_size();
      const double gflops = tessera::train::model_flops(s.cfg, padded, B) / dt / 1e9;
      const double tps = B * s.cfg.seq_length / dt;
      const double peak = dtype == DType::kF32 ? peak_f32 : peak_bf16;
      std::printf("%-11s %-5s %10.1f %11.0f %10.1f %11.1f%% %13.1f%% %10.1f %10.1f", s.name,
                  tessera::dtype_name(dtype), dt * 1e3, tps, gflops, 100 * gflops / peak_f32,
                  100 * gflops / peak, times.gemm_seconds[i] * 1e3, times.rest_seconds[i] * 1e3);
      if (dtype == DType::kF32) f32_tps = tps;
      if (dtype == DType::kBF16 && f32_tps > 0) std::printf("   bf16/fp32 = %.2fx", tps / f32_tps);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}
