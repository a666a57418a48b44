// The optimizer over a model's flat buffers: which parameters get weight decay, that bf16
// compute keeps exact fp32 master weights, and that a separate fp32 master with fp32 compute
// (parameter offload's) trains bitwise as the model's own buffer does.
#include "tessera/optim/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>

#include "tessera/model/gpt_model.h"

namespace tessera::optim {
namespace {

TEST(Optimizer, WeightDecaySkipsBiasesAndNormWeights) {
  model::ModelConfig cfg = model::preset("gpt2-tiny");
  model::GPTModel m(cfg, DType::kF32, 1);
  std::vector<float> before(m.params().flat_values().data<float>(),
                            m.params().flat_values().data<float>() + m.params().numel());
  Optimizer opt(m.params(), {"adam", 0.9, 0.999, 1e-8, 0.9, /*weight_decay=*/0.5});
  m.params().zero_grads();  // zero gradients: AdamW's update is decay alone
  opt.step(/*lr=*/0.1, 1.0f);
  int decayed = 0, kept = 0;
  for (const model::Parameter& p : m.params().all()) {
    const float* w = p.value.data<float>();
    for (int64_t i = 0; i < p.numel(); i += 17) {
      const float w0 = before[p.offset + i];
      // Decoupled decay: w -= lr * wd * w, computed as w * (1 - lr*wd) in fp32.
      const float expected = p.weight_decay ? w0 * (1.0f - 0.1f * 0.5f) : w0;
      ASSERT_NEAR(w[i], expected, 1e-7f * std::max(1.0f, std::fabs(w0))) << p.name << "[" << i << "]";
    }
    (p.weight_decay ? decayed : kept) += 1;
    const bool is_norm_or_bias = p.name.find(".bias") != std::string::npos ||
                                 p.name.find("ln_") != std::string::npos;
    EXPECT_EQ(p.weight_decay, !is_norm_or_bias) << p.name;
  }
  EXPECT_GT(decayed, 0);
  EXPECT_GT(kept, 0);
}

TEST(Optimizer, DecoupledLrMovesOnlyTheEmbeddingAndOutputLayer) {
  // Megatron's --decoupled-lr: the word embedding and the output layer (untied here) take their
  // own learning rate. With zero gradients AdamW's update is decay alone, w (1 - lr wd), so each
  // parameter shows which rate it took.
  model::ModelConfig cfg = model::preset("gpt2-tiny");
  cfg.untie_embeddings_and_output_weights = true;
  model::GPTModel m(cfg, DType::kF32, 1);
  std::vector<float> before(m.params().flat_values().data<float>(),
                            m.params().flat_values().data<float>() + m.params().numel());
  Optimizer opt(m.params(), {"adam", 0.9, 0.999, 1e-8, 0.9, /*weight_decay=*/0.5});
  m.params().zero_grads();
  opt.step(/*lr=*/0.1, 1.0f, /*decoupled_lr=*/0.4);
  int decoupled = 0;
  for (const model::Parameter& p : m.params().all()) {
    if (!p.weight_decay) continue;
    const bool outer = p.name == "transformer.wte.weight" || p.name == "lm_head.weight";
    EXPECT_EQ(p.embedding_or_output, outer) << p.name;
    decoupled += outer ? 1 : 0;
    const float factor = 1.0f - (outer ? 0.4f : 0.1f) * 0.5f;
    const float w0 = before[p.offset + 3];
    EXPECT_NEAR(p.value.data<float>()[3], w0 * factor, 1e-7f * std::max(1.0f, std::fabs(w0)))
        << p.name;
  }
  EXPECT_EQ(decoupled, 2);
}

TEST(Optimizer, Bf16ComputeKeepsExactFp32Masters) {
  model::ModelConfig cfg = model::preset("llama-tiny");
  model::GPTModel m(cfg, DType::kBF16, 3);
  Optimizer opt(m.params(), {});
  const model::Parameter& p = m.params().get("model.layers.0.mlp.down_proj.weight");
  const Tensor master = opt.master(p);
  for (int64_t i = 0; i < p.numel(); i += 13) {
    const int64_t cols = p.global_shape.back();
    EXPECT_EQ(master.data<float>()[i], model::ParameterSet::init_value(p, 3, i / cols, i % cols));
    EXPECT_EQ(p.value.data<bf16>()[i].bits, bf16(master.data<float>()[i]).bits);
  }
}

TEST(Optimizer, SeparateFp32MasterEqualsTheBufferBitwiseAndIsNeverRead) {
  model::ModelConfig cfg = model::preset("gpt2-tiny");
  model::GPTModel shared(cfg, DType::kF32, 5), apart(cfg, DType::kF32, 5);
  OptimizerOptions o;
  Optimizer a(shared.params(), o);
  o.separate_master = true;
  Optimizer b(apart.params(), o);
  const int64_t n = shared.params().numel();
  for (int step = 1; step <= 3; ++step) {
    for (model::GPTModel* m : {&shared, &apart}) {
      float* g = m->params().flat_grads().data<float>();
      for (int64_t i = 0; i < n; ++i) g[i] = 1e-3f * static_cast<float>((i * 7 + step) % 13 - 6);
    }
    // Between steps the separate master's buffer may lose its values (parameter offload gives
    // its pages back): the update must not read it.
    std::fill_n(apart.params().flat_values().data<float>(), n, 0.0f);
    a.step(1e-2, 0.5f);
    b.step(1e-2, 0.5f);
    ASSERT_EQ(0, std::memcmp(shared.params().flat_values().raw(),
                             apart.params().flat_values().raw(), n * sizeof(float)))
        << "step " << step;
  }
  // The master comes from the optimizer's copy, equal to the buffer bitwise.
  std::fill_n(apart.params().flat_values().data<float>(), n, 0.0f);
  const Tensor ma = a.owned_master(), mb = b.owned_master();
  EXPECT_EQ(0, std::memcmp(ma.raw(), mb.raw(), ma.nbytes()));
  EXPECT_EQ(a.master_sum_squares({{0, n}}), b.master_sum_squares({{0, n}}));
  // refresh_compute_values() puts the master back into the buffer.
  b.refresh_compute_values();
  EXPECT_EQ(0, std::memcmp(shared.params().flat_values().raw(), apart.params().flat_values().raw(),
                           n * sizeof(float)));
}

// Owned ranges that take in padding (elements of no parameter, where a DP size that does not
// divide the buffer pads it): owned_master() puts every owned element at its packed index, the
// padding as zero. (Packing the runs alone shifted everything after a gap: the export of a
// DP 3 run read wrong weights.)
TEST(Optimizer, OwnedMasterKeepsPaddingInPlace) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    model::ParameterSet params;
    params.add("a", {3, 5}, model::InitKind::kNormal, 0.02f, true);
    params.pad_to(8);  // 15 -> 16: one padding element
    params.add("b", {7}, model::InitKind::kNormal, 0.02f, false);
    params.allocate(dtype, 7, /*multiple=*/6);  // 23 -> 24: one more at the end
    ASSERT_EQ(params.numel(), 24);
    Optimizer opt(params, {"adam", 0.9, 0.999, 1e-8, 0.9, 0.0}, {{2, 10}, {12, 24}});
    const Tensor m = opt.owned_master();
    ASSERT_EQ(m.numel(), 20);
    std::vector<float> expected;
    std::vector<float> a(15), b(7);
    params.initial_values(params.get("a"), a.data());
    params.initial_values(params.get("b"), b.data());
    for (int64_t i = 2; i < 10; ++i) expected.push_back(a[i]);
    for (int64_t i = 12; i < 24; ++i)
      expected.push_back(i < 15 ? a[i] : i == 15 || i == 23 ? 0.0f : b[i - 16]);
    for (int64_t i = 0; i < 20; ++i)
      EXPECT_EQ(m.data<float>()[i], expected[i]) << dtype_name(dtype) << " packed " << i;
  }
}

// In memory, visited in windows of `window` elements (as NVMe storage visits sub-groups).
class WindowedStorage final : public StateStorage {
 public:
  explicit WindowedStorage(int64_t window) : window_(window) {}
  void initialize(int64_t numel, int arrays, const Initializer& init) override {
    arrays_.assign(arrays, std::vector<float>(numel));
    for_each_window(StateAccess::kReadWrite, init);
  }
  void for_each_window(StateAccess, const std::function<void(const Window&)>& fn) override {
    for (int64_t b = 0; b < numel(); b += window_) {
      Window w{b, std::min(numel(), b + window_), {}};
      for (auto& a : arrays_) w.arrays.push_back(a.data() + b);
      fn(w);
    }
  }
  int64_t numel() const override { return arrays_.empty() ? 0 : arrays_[0].size(); }
  bool resident() const override { return false; }

 private:
  int64_t window_;
  std::vector<std::vector<float>> arrays_;
};

// A visit cut into windows gives each owned run in consecutive pieces, in flat order, each
// numbered with its window (what a streamed checkpoint save relies on).
TEST(Optimizer, VisitGivesRunsInConsecutivePiecesNumberedByWindow) {
  model::ParameterSet params;
  params.add("a", {3, 5}, model::InitKind::kNormal, 0.02f, true);
  params.add("b", {7}, model::InitKind::kNormal, 0.02f, false);
  params.allocate(DType::kBF16, 7);
  Optimizer opt(params, {"adam", 0.9, 0.999, 1e-8, 0.9, 0.0}, {{2, 20}},
                std::make_unique<WindowedStorage>(4));
  ASSERT_EQ(opt.owned_runs().size(), 2u);  // a [2, 15), b [15, 20)
  std::vector<Optimizer::StateRun> pieces;
  opt.visit_state_runs(StateAccess::kRead,
                       [&](const Optimizer::StateRun& run) { pieces.push_back(run); });
  // Windows of packed [0, 4) [4, 8) [8, 12) [12, 16) [16, 18): a's run in 4 pieces, the fourth
  // window shared by a's end and b's start.
  const std::vector<std::tuple<std::string, int64_t, int64_t, int64_t>> expected = {
      {"a", 2, 6, 0},   {"a", 6, 10, 1},  {"a", 10, 14, 2},
      {"a", 14, 15, 3}, {"b", 15, 18, 3}, {"b", 18, 20, 4}};
  ASSERT_EQ(pieces.size(), expected.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto& [name, begin, end, window] = expected[i];
    EXPECT_EQ(pieces[i].param->name, name) << i;
    EXPECT_EQ(pieces[i].begin, begin) << i;
    EXPECT_EQ(pieces[i].end, end) << i;
    EXPECT_EQ(pieces[i].window, window) << i;
    EXPECT_EQ(pieces[i].packed, begin - 2) << i;
  }
}

}  // namespace
}  // namespace tessera::optim
