// The kernels' scratch plans (kernels/scratch_plan.h: plan_gemm, plan_linear_*,
// plan_norm_backward) against the memory accountant, on the target ctest caps the kernels to
// (kernels.<target>.*): a sequence of calls runs on a fresh thread, whose thread_local buffers
// start empty and are freed when it ends, and the peak of MemoryCategory::kOther it reaches must
// equal the plan's peak for the same calls, byte for byte, on every GEMM path the target has
// (oneDNN, the blocked GEMM, the widened path); with two threads the plan is a bound.
#include "tessera/kernels/scratch_plan.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/memory.h"
#include "tessera/kernels/gemm.h"
#include "tessera/kernels/linear.h"
#include "tessera/kernels/norms.h"

namespace tessera::kernels {
namespace {

TEST(ScratchPlan, BuffersKeepTheirLargestAndTheLargestTemporaryAdds) {
  ScratchPlan plan;
  plan.grow("a", 100);
  plan.grow("a", 40);  // a buffer never shrinks
  plan.grow("b", 0);   // ScratchBuffer::get(0) takes one byte
  plan.temporary(30);
  plan.temporary(20);
  EXPECT_EQ(plan.buffers().at("a"), 100);
  EXPECT_EQ(plan.buffers().at("b"), 1);
  EXPECT_EQ(plan.largest_temporary(), 30);
  EXPECT_EQ(plan.peak_bytes(), 131);
}

// The accountant's peak of kOther above its level before, while `calls` run on a new thread of
// a team of `threads`. The worker frees its own buffers when it ends, before join returns; the
// other threads of its OpenMP team free theirs when they end, which libgomp lets happen later.
// Such a free inside the next measurement lowered it (a 1-thread measurement after a 2-thread
// one failed once in about a dozen runs with a build running beside), so this waits for the
// level to come back before returning, and a level that does not come back (a leak) fails.
int64_t measured_peak(int threads, const std::function<void()>& calls) {
  MemoryAccountant& accountant = MemoryAccountant::instance();
  const auto level = [&] { return accountant.snapshot().current[int(MemoryCategory::kOther)]; };
  const int64_t before = level();
  accountant.reset_peaks();
  std::thread worker([&] {
    omp_set_num_threads(threads);
    calls();
  });
  worker.join();
  const int64_t peak = accountant.snapshot().peak[int(MemoryCategory::kOther)];
  for (int waits = 0; level() != before && waits < 100; ++waits)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(level(), before) << "kOther did not come back to its level within 5 s of the calls";
  return peak - before;
}

// A linear layer's forward and backward (the products of a transformer's layers) and a norm's
// backward, of type T: run and planned.
template <typename T>
struct LayerCalls {
  int64_t N, C, OC;
  bool bias;
  std::vector<T> x, w, b, y, dy, dx, norm_dx, norm_w;
  std::vector<float> dw, db, stats, norm_grads;
  LayerCalls(int64_t n, int64_t c, int64_t oc, bool with_bias)
      : N(n),
        C(c),
        OC(oc),
        bias(with_bias),
        x(N * C, from_f32<T>(0.5f)),
        w(OC * C, from_f32<T>(0.25f)),
        b(OC, from_f32<T>(1.0f)),
        y(N * OC),
        dy(N * OC, from_f32<T>(0.125f)),
        dx(N * C),
        norm_dx(N * C),
        norm_w(C, from_f32<T>(1.0f)),
        dw(OC * C),
        db(OC),
        stats(2 * N, 1.0f),
        norm_grads(2 * C) {}

  void run() {
    linear_forward(y.data(), x.data(), w.data(), bias ? b.data() : nullptr, N, C, OC);
    linear_backward(dx.data(), dw.data(), bias ? db.data() : nullptr, dy.data(), x.data(), w.data(),
                    N, C, OC);
    layer_norm_backward(norm_dx.data(), norm_grads.data(), norm_grads.data() + C, dx.data(),
                        x.data(), norm_w.data(), stats.data(), stats.data() + N, N, C);
  }
  void plan(ScratchPlan& p, int threads) const {
    plan_linear_forward(p, dtype_of<T>(), N, C, OC, bias, threads);
    plan_linear_backward(p, dtype_of<T>(), N, C, OC, true, threads);
    plan_norm_backward(p, N, C, true);
  }
};

template <typename T>
void expect_plan_equals_measurement(const std::vector<LayerCalls<T>*>& layers, int threads,
                                    const std::string& what) {
  ScratchPlan plan;
  for (const LayerCalls<T>* l : layers) l->plan(plan, threads);
  const int64_t measured = measured_peak(threads, [&] {
    for (LayerCalls<T>* l : layers) l->run();
  });
  std::string buffers;
  for (const auto& [name, bytes] : plan.buffers())
    buffers += "\n  " + name + ": " + std::to_string(bytes);
  // One thread: exact. Several: each thread of the blocked GEMM's team is planned with a whole
  // block, a bound (the dynamic schedule may give a thread only the last, smaller one).
  if (threads == 1)
    EXPECT_EQ(plan.peak_bytes(), measured) << what << ", 1 thread" << buffers;
  else
    EXPECT_GE(plan.peak_bytes(), measured) << what << ", " << threads << " threads" << buffers;
}

// Shapes of a small transformer's products (a QKV projection with bias, an output projection
// without, an LM head with a depth past one block of the blocked GEMM) and one over its shared-
// operand budget, run in sequence as a step does: each buffer's largest call counts.
template <typename T>
void check_layer_sequence(const std::string& what) {
  LayerCalls<T> qkv(64, 256, 768, true), proj(64, 256, 256, false), head(64, 512, 384, false);
  expect_plan_equals_measurement<T>({&qkv, &proj, &head}, 1, what);
  LayerCalls<T> big(512, 1024, 2048, true);  // B of 2M floats: above the shared budget at 2 threads
  expect_plan_equals_measurement<T>({&qkv, &big}, 1, what);
  expect_plan_equals_measurement<T>({&qkv, &big}, 2, what);
}

TEST(ScratchPlan, Fp32LayersEqualTheMeasuredPeak) { check_layer_sequence<float>("fp32"); }

TEST(ScratchPlan, Bf16LayersEqualTheMeasuredPeakOnEveryPath) {
  const Bf16GemmPath chosen = bf16_gemm_path();
  check_layer_sequence<bf16>(std::string("bf16, ") + bf16_gemm_path_name(chosen));
  for (Bf16GemmPath path : {Bf16GemmPath::kPacked, Bf16GemmPath::kWidenToFp32}) {
    if (path == chosen) continue;
    set_bf16_gemm_path(path);
    check_layer_sequence<bf16>(std::string("bf16, ") + bf16_gemm_path_name(path));
  }
  set_bf16_gemm_path(chosen);
}

TEST(ScratchPlan, Fp16LayersEqualTheMeasuredPeak) { check_layer_sequence<fp16>("fp16"); }

TEST(ScratchPlan, NormBackwardIsATemporaryOfItsPartialSums) {
  ScratchPlan plan;
  plan_norm_backward(plan, 130, 96, true);   // 3 chunks of 64 rows, weight and bias: 3 * 192
  plan_norm_backward(plan, 130, 96, false);  // RMSNorm: 3 * 96
  EXPECT_EQ(plan.peak_bytes(), 4 * 3 * 192);
  EXPECT_TRUE(plan.buffers().empty());
}

}  // namespace
}  // namespace tessera::kernels
