// The owned gradients leaving memory at the accumulation boundary (distributed/gradient_offload.h)
// with the single-rank gradient reducer: each bucket's part is handed to the storage as soon as
// backward reports it final in the last micro-batch (not in earlier ones), its pages given back;
// parts touching a range changed after the reduction wait for the step and carry the change; the
// norm's terms equal TensorParallelGrads' sum over the same ranges bit for bit; the overflow hook.
#include "tessera/distributed/gradient_offload.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <vector>

#include "tessera/core/memory.h"
#include "tessera/kernels/adamw.h"
#include "tessera/model/gpt_model.h"

namespace tessera::distributed {
namespace {

// A storage that holds gradients in a map: what was handed over, and when.
class RecordingStorage final : public optim::StateStorage {
 public:
  void initialize(int64_t numel, int, const Initializer&) override { numel_ = numel; }
  void for_each_window(optim::StateAccess, const std::function<void(const Window&)>&) override {}
  int64_t numel() const override { return numel_; }
  bool resident() const override { return false; }
  bool holds_gradients() const override { return true; }
  void store_gradients(int64_t packed, const float* grads, int64_t count) override {
    EXPECT_EQ(stored.count(packed), 0u) << "stored twice: " << packed;
    stored[packed] = std::vector<float>(grads, grads + count);
  }
  void defer_gradients(int64_t packed, int64_t count) override { deferred[packed] = count; }
  void gradients_stored() override { ++completions; }

  std::map<int64_t, std::vector<float>> stored;  // by packed start
  std::map<int64_t, int64_t> deferred;           // by packed start: elements
  int completions = 0;

 private:
  int64_t numel_ = 0;
};

const int64_t kPage = sysconf(_SC_PAGESIZE);

struct Bed {
  model::GPTModel model{model::preset("gpt2-tiny"), DType::kF32, 1};
  model::ParameterSet& params = model.params();
  const int64_t n = params.numel();
  DataParallelGrads dp{params, nullptr, ShardingPlan::for_stage(2, n / 5, true)};
  RecordingStorage storage;
  float* grads = params.flat_grads().data<float>();

  Bed() { storage.initialize(n, 2, nullptr); }
  // The value backward leaves in element i (some exact zeros, for the zero count).
  static float value(int64_t i, int pass) {
    return i % 7 == 3 ? 0.0f : std::sin(0.001f * static_cast<float>(i) + pass);
  }
  // A micro-batch's backward: buckets written from the end of the buffer, each reported final.
  // Returns the values written.
  std::vector<float> backward(int pass, const std::function<void(const FlatRange&)>& after) {
    std::vector<float> written(n);
    const std::vector<FlatRange>& owned = dp.owned();  // DP 1: the buckets, increasing
    for (size_t b = owned.size(); b-- > 0;) {
      for (int64_t i = owned[b].begin; i < owned[b].end; ++i)
        grads[i] += written[i] = value(i, pass);
      dp.grads_ready(owned[b].begin);
      after(owned[b]);
    }
    dp.finish();
    return written;
  }
};

TEST(GradientOffload, PartsLeaveMemoryWhenTheirBucketIsFinalInTheLastMicroBatch) {
  Bed bed;
  const std::vector<FlatRange> owned = bed.dp.owned();
  ASSERT_GE(owned.size(), 4u);
  GradientOffload offload(bed.params, bed.storage, owned, owned, {}, true);
  bed.dp.set_boundary_hook([&](const FlatRange& part) { offload.part_final(part); });
  offload.begin_iteration(false);
  bed.dp.start_iteration();
  // Nothing is held before backward writes (a partial page at each end at most).
  EXPECT_LE(resident_bytes(bed.grads, bed.n * 4), 2 * kPage);

  // Micro-batch 1 of 2 only accumulates.
  bed.dp.set_accumulation_boundary(false);
  const std::vector<float> first = bed.backward(0, [&](const FlatRange&) {
    EXPECT_TRUE(bed.storage.stored.empty());
  });
  // Micro-batch 2: each part is stored as soon as its bucket is final, and zeroed.
  bed.dp.set_accumulation_boundary(true);
  std::vector<float> sums(bed.n);
  int64_t packed = bed.n;
  bed.backward(1, [&](const FlatRange& part) {
    packed -= part.size();
    ASSERT_EQ(bed.storage.stored.count(packed), 1u) << "part at " << part.begin << " not stored";
    const std::vector<float>& got = bed.storage.stored[packed];
    ASSERT_EQ(static_cast<int64_t>(got.size()), part.size());
    for (int64_t i = part.begin; i < part.end; ++i) {
      sums[i] = first[i] + Bed::value(i, 1);
      ASSERT_EQ(got[i - part.begin], first[i] + Bed::value(i, 1)) << i;
    }
  });
  EXPECT_EQ(offload.parts_stored_early(), static_cast<int64_t>(owned.size()));
  offload.before_step();
  EXPECT_EQ(bed.storage.completions, 1);
  // Given back (reading them would map pages again: checked after), and zero.
  EXPECT_LE(resident_bytes(bed.grads, bed.n * 4),
            2 * kPage * static_cast<int64_t>(owned.size()));
  for (int64_t i = 0; i < bed.n; ++i) ASSERT_EQ(bed.grads[i], 0.0f) << i;

  // The norm's terms: kernels::sum_squares over each counted range of the same values at the
  // same addresses, summed in order (what TensorParallelGrads::local_sum_squares does).
  std::copy(sums.begin(), sums.end(), bed.grads);
  double expected = 0, zeros = 0;
  for (const FlatRange& r : owned) {
    expected += kernels::sum_squares(bed.grads + r.begin, r.size());
    zeros += count_zeros(bed.grads + r.begin, r.size());
  }
  EXPECT_EQ(offload.local_sum_squares(), expected);
  EXPECT_EQ(offload.local_zeros(), zeros);
  EXPECT_GT(zeros, 0);
}

// A late range (here: changed between the reduction and the step, as the tensor-parallel
// completion changes sequence-parallel norms' gradients) and the counted range around it are held
// in memory and stored by before_step(), with the change, the rest of their part leaving at
// once; the held range's norm term is of the changed values. The overflow hook plants +Inf in
// element 0 before its norm term is taken.
TEST(GradientOffload, LateRangesWaitForTheStepAndCarryTheirChange) {
  Bed bed;
  const std::vector<FlatRange> owned = bed.dp.owned();
  const FlatRange late = {owned[1].begin + 5, owned[1].begin + 9};
  // Counted ranges as TensorParallelGrads cuts them: the late range apart from its neighbours.
  std::vector<FlatRange> counted;
  for (size_t i = 0; i < owned.size(); ++i) {
    if (i != 1) {
      counted.push_back(owned[i]);
      continue;
    }
    counted.push_back({owned[1].begin, late.begin});
    counted.push_back(late);
    counted.push_back({late.end, owned[1].end});
  }
  GradientOffload offload(bed.params, bed.storage, owned, counted, {late}, false);
  EXPECT_EQ(offload.held_elements(), 4);
  bed.dp.set_boundary_hook([&](const FlatRange& part) { offload.part_final(part); });
  offload.begin_iteration(true);
  bed.dp.start_iteration();
  bed.dp.set_accumulation_boundary(true);
  bed.backward(0, [](const FlatRange&) {});
  EXPECT_EQ(offload.parts_stored_early(), static_cast<int64_t>(owned.size()));
  // DP 1: packed = flat - the first owned range's start (0).
  const int64_t p1 = owned[1].begin - owned[0].begin;
  ASSERT_EQ(bed.storage.deferred.size(), 1u);
  EXPECT_EQ(bed.storage.deferred[p1 + 5], 4);
  ASSERT_EQ(bed.storage.stored.count(p1), 1u);
  ASSERT_EQ(bed.storage.stored.count(p1 + 9), 1u);
  EXPECT_EQ(bed.storage.stored.count(p1 + 5), 0u);
  EXPECT_EQ(bed.storage.stored[p1].size(), 5u);
  for (int64_t i = late.begin; i < late.end; ++i) bed.grads[i] = 2.0f;  // the late change
  offload.before_step();
  ASSERT_EQ(bed.storage.stored.count(p1 + 5), 1u);
  EXPECT_EQ(bed.storage.stored[p1 + 5], std::vector<float>(4, 2.0f));
  // Element 0 (counted, not held) was +Inf when its norm term was taken, and when stored.
  EXPECT_TRUE(std::isinf(offload.local_sum_squares()));
  EXPECT_TRUE(std::isinf(bed.storage.stored[0][0]));

  // The next iteration starts clean: no plant, every piece stored again; the norm's terms are
  // those of the values in place, the late ones changed, summed in the counted order.
  bed.storage.stored.clear();
  bed.storage.deferred.clear();
  offload.begin_iteration(false);
  bed.dp.start_iteration();
  const std::vector<float> again = bed.backward(1, [](const FlatRange&) {});
  for (int64_t i = late.begin; i < late.end; ++i) bed.grads[i] = 3.0f;
  offload.before_step();
  std::vector<float> values = again;
  for (int64_t i = late.begin; i < late.end; ++i) values[i] = 3.0f;
  std::copy(values.begin(), values.end(), bed.grads);
  double expected = 0;
  for (const FlatRange& r : counted)
    expected += kernels::sum_squares(bed.grads + r.begin, r.size());
  EXPECT_EQ(offload.local_sum_squares(), expected);
}

}  // namespace
}  // namespace tessera::distributed
