// Parameter initialisation: ParameterSet::allocate of one GPT-2 (124 M) transformer layer's
// weights and of its 50304 x 768 embedding, N(0, 0.02) from the counter-based generator
// (core/philox.h), the work every rank does before its first step. Reported as parameters/s;
// the model's whole set is 124.4 M parameters (tessera-train prints the count).
// Run: build/bin/param_init_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <string>

#include "tessera/core/threads.h"
#include "tessera/model/parameter.h"

namespace {

using tessera::model::InitKind;
using tessera::model::ParameterSet;

void BM_Init(benchmark::State& state, bool embedding) {
  tessera::set_num_threads(static_cast<int>(state.range(0)));
  int64_t params = 0;
  for (auto _ : state) {
    ParameterSet set;
    if (embedding) {
      set.add("wte", {50304, 768}, InitKind::kNormal, 0.02f, true);
    } else {
      set.add("attn.qkv", {2304, 768}, InitKind::kNormal, 0.02f, true);
      set.add("attn.proj", {768, 768}, InitKind::kNormal, 0.02f, true);
      set.add("mlp.fc", {3072, 768}, InitKind::kNormal, 0.02f, true);
      set.add("mlp.proj", {768, 3072}, InitKind::kNormal, 0.02f, true);
    }
    set.allocate(tessera::DType::kF32, 1234);
    benchmark::DoNotOptimize(set.flat_values().raw());
    params += set.numel();
  }
  state.counters["params/s"] =
      benchmark::Counter(static_cast<double>(params), benchmark::Counter::kIsRate);
}

void threads_args(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(BM_Init, gpt2_layer, false)->Apply(threads_args);
BENCHMARK_CAPTURE(BM_Init, gpt2_embedding, true)->Apply(threads_args);

}  // namespace

BENCHMARK_MAIN();
