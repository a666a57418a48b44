// The MoE block against an independent double-precision reference: the forward output, and every
// gradient (input, router, experts, shared expert) against central finite differences of the
// reference objective sum(y * g) + aux loss + z-loss, for softmax, pre-softmax and sigmoid
// routing, GELU and SwiGLU experts, capacity drops and a shared expert. Also the names, the
// capacity bookkeeping and the expert-bias rule.
#include "tessera/model/moe_layer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::model {
namespace {

ModelConfig moe_config(bool swiglu, moe::ScoreFunction score, bool pre_softmax, int shared,
                       float capacity, bool bias) {
  ModelConfig c;
  c.num_layers = 1;
  c.hidden_size = 12;
  c.num_attention_heads = 2;
  c.swiglu = swiglu;
  c.add_bias_linear = !swiglu;  // GELU experts with biases, SwiGLU ones without
  c.init_method_std = 0.3f;
  c.moe.num_experts = 4;
  c.moe.topk = 2;
  c.moe.ffn_hidden_size = 10;
  c.moe.shared_expert_size = shared;
  c.moe.score = score;
  c.moe.pre_softmax = pre_softmax;
  c.moe.topk_scaling = 1.5f;
  c.moe.aux_loss_coeff = 0.1f;
  c.moe.z_loss_coeff = 0.01f;
  c.moe.capacity_factor = capacity;
  c.moe.expert_bias = bias;
  return c;
}

// The block's parameters and an input, all as doubles keyed by name.
struct Block {
  ModelConfig cfg;
  parallel::TensorParallel tp;  // one rank
  ParameterSet params;
  std::unique_ptr<MoeLayer> layer;
  Block(const ModelConfig& c) : cfg(c) {
    MoeLayer::declare(params, "layer", cfg);
    params.allocate(DType::kF32, 7);
    layer = std::make_unique<MoeLayer>(params, "layer", cfg, &tp);
  }
  std::vector<double> value(const std::string& name) const {
    const Parameter& p = params.get(name);
    const float* v = p.value.data<float>();
    return std::vector<double>(v, v + p.numel());
  }
};

double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu(double x) { return x / (1 + std::exp(-x)); }
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// The reference: every parameter by name (doubles), x (N, C), upstream g (N, C), B sequences.
struct Reference {
  const ModelConfig& cfg;
  std::map<std::string, std::vector<double>> w;
  std::vector<float> bias;  // expert bias (fp32, as the layer holds it)
  int64_t N = 0, B = 1;

  // One MLP (names from Mlp::Names) of F features on row x.
  std::vector<double> mlp(const Mlp::Names& n, int64_t F, const double* x) const {
    const int64_t C = cfg.hidden_size;
    std::vector<double> h(F), out(C);
    auto up = [&](int i, int64_t f) {
      const std::vector<double>& W = w.at(n.up_weights[i]);
      double a = cfg.add_bias_linear ? w.at(n.up_biases[i])[f] : 0.0;
      for (int64_t c = 0; c < C; ++c) a += W[f * C + c] * x[c];
      return a;
    };
    for (int64_t f = 0; f < F; ++f) h[f] = cfg.swiglu ? silu(up(0, f)) * up(1, f) : gelu(up(0, f));
    const std::vector<double>& D = w.at(n.down_weight);
    for (int64_t c = 0; c < C; ++c) {
      double a = cfg.add_bias_linear ? w.at(n.down_bias)[c] : 0.0;
      for (int64_t f = 0; f < F; ++f) a += D[c * F + f] * h[f];
      out[c] = a;
    }
    return out;
  }

  // sum(y * g) + aux + z over the tokens.
  double objective(const std::vector<double>& x, const std::vector<double>& g,
                   const std::string& block) const {
    const int64_t C = cfg.hidden_size, E = cfg.moe.num_experts, k = cfg.moe.topk;
    const std::vector<double>& Wr = w.at(block + ".gate.weight");
    std::vector<double> logits(N * E);
    for (int64_t t = 0; t < N; ++t)
      for (int64_t e = 0; e < E; ++e) {
        double a = 0;
        for (int64_t c = 0; c < C; ++c) a += Wr[e * C + c] * x[t * C + c];
        logits[t * E + e] = a;
      }
    // Routing: chosen experts and weights per token.
    std::vector<std::vector<int>> chosen(N);
    std::vector<std::vector<double>> weight(N);
    std::vector<int64_t> count(E, 0);
    for (int64_t t = 0; t < N; ++t) {
      const double* l = &logits[t * E];
      std::vector<double> key(l, l + E), full(E);
      double mx = *std::max_element(l, l + E), s = 0;
      for (int e = 0; e < E; ++e) s += full[e] = std::exp(l[e] - mx);
      for (double& p : full) p /= s;
      if (cfg.moe.score == moe::ScoreFunction::kSigmoid)
        for (int e = 0; e < E; ++e) key[e] = sigmoid(l[e]) + bias[e];
      else if (cfg.moe.pre_softmax)
        key = full;
      std::vector<int> idx(E);
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return key[a] > key[b]; });
      idx.resize(k);
      std::vector<double> wt(k);
      double sum = 0;
      for (int a = 0; a < k; ++a) {
        if (cfg.moe.score == moe::ScoreFunction::kSigmoid)
          wt[a] = sigmoid(l[idx[a]]);
        else if (cfg.moe.pre_softmax)
          wt[a] = full[idx[a]];
        else
          wt[a] = std::exp(l[idx[a]] - l[idx[0]]);
        sum += wt[a];
      }
      for (double& v : wt) v = v * cfg.moe.topk_scaling / (cfg.moe.pre_softmax ? 1.0 : sum);
      for (int e : idx) ++count[e];
      chosen[t] = idx;
      weight[t] = wt;
    }
    // Capacity: per expert, keep the largest weights (ties to the lower token).
    std::vector<std::vector<bool>> kept(N, std::vector<bool>(k, true));
    if (cfg.moe.capacity_factor > 0) {
      const int64_t cap =
          static_cast<int64_t>(std::ceil(double(N) * k / E * cfg.moe.capacity_factor));
      for (int e = 0; e < E; ++e) {
        std::vector<std::pair<int64_t, int>> mine;
        for (int64_t t = 0; t < N; ++t)
          for (int a = 0; a < k; ++a)
            if (chosen[t][a] == e) mine.push_back({t, a});
        std::stable_sort(mine.begin(), mine.end(), [&](auto p, auto q) {
          return float(weight[p.first][p.second]) > float(weight[q.first][q.second]);
        });
        for (size_t i = cap; i < mine.size(); ++i) kept[mine[i].first][mine[i].second] = false;
      }
    }
    const std::string prefix = block;
    double J = 0;
    for (int64_t t = 0; t < N; ++t) {
      std::vector<double> y(C, 0.0);
      for (int a = 0; a < k; ++a) {
        if (!kept[t][a]) continue;
        const int e = chosen[t][a];
        const std::string p = prefix + ".experts." + std::to_string(e);
        Mlp::Names n;
        if (cfg.swiglu) {
          n = Mlp::dense_names(p, cfg);
          if (block.find("block_sparse_moe") != std::string::npos)
            n = {{p + ".w1.weight", p + ".w3.weight"}, {}, p + ".w2.weight", ""};
        } else {
          n = Mlp::dense_names(p, cfg);
        }
        const std::vector<double> o = mlp(n, cfg.moe_ffn(), &x[t * C]);
        for (int64_t c = 0; c < C; ++c) y[c] += weight[t][a] * o[c];
      }
      if (cfg.moe.shared_expert_size > 0) {
        const std::vector<double> o =
            mlp(Mlp::dense_names(prefix + ".shared_experts", cfg), cfg.moe.shared_expert_size,
                &x[t * C]);
        for (int64_t c = 0; c < C; ++c) y[c] += o[c];
      }
      for (int64_t c = 0; c < C; ++c) J += y[c] * g[t * C + c];
    }
    // Aux loss (Switch form over the micro-batch) and z-loss.
    double aux = 0, z = 0;
    for (int64_t t = 0; t < N; ++t) {
      const double* l = &logits[t * E];
      std::vector<double> P(E);
      double s = 0;
      if (cfg.moe.score == moe::ScoreFunction::kSigmoid) {
        for (int e = 0; e < E; ++e) s += P[e] = sigmoid(l[e]);
      } else {
        const double mx = *std::max_element(l, l + E);
        for (int e = 0; e < E; ++e) s += P[e] = std::exp(l[e] - mx);
      }
      for (int e = 0; e < E; ++e) aux += count[e] * P[e] / s;
      const double mx = *std::max_element(l, l + E);
      double se = 0;
      for (int e = 0; e < E; ++e) se += std::exp(l[e] - mx);
      const double lse = mx + std::log(se);
      z += lse * lse;
    }
    aux *= cfg.moe.aux_loss_coeff * double(E) / (double(k) * N * N);
    z *= cfg.moe.z_loss_coeff / N;
    return J + aux + z;
  }
};

struct Outcome {
  double max_err = 0, max_grad = 0;
};

// Runs the layer forward and backward (aux scale 1) and compares every gradient with central
// differences of the reference objective; returns the worst error per checked quantity.
void check_against_reference(const ModelConfig& cfg, const char* what) {
  Block blk(cfg);
  const int64_t B = 2, T = 8, N = B * T, C = cfg.hidden_size;
  std::mt19937 gen(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tensor x = Tensor::empty({N, C}, DType::kF32), g = Tensor::empty({N, C}, DType::kF32);
  for (int64_t i = 0; i < N * C; ++i) x.data<float>()[i] = nd(gen), g.data<float>()[i] = nd(gen);
  StepContext ctx = StepContext::make(B, T, 0, 1, 1, true);
  ctx.moe_aux_loss_scale = 1.0;
  if (cfg.moe.expert_bias) blk.layer->set_expert_bias({0.05f, -0.1f, 0.2f, 0.0f});

  MoeLayer::Saved s;
  const Tensor y = blk.layer->forward(x, s, ctx);
  blk.params.zero_grads();
  const Tensor dx = blk.layer->backward(g, s, ctx);

  Reference ref{cfg, {}, blk.layer->expert_bias(), N, B};
  for (const Parameter& p : blk.params.all()) ref.w[p.name] = blk.value(p.name);
  std::vector<double> xd(x.data<float>(), x.data<float>() + N * C);
  const std::vector<double> gd(g.data<float>(), g.data<float>() + N * C);
  const std::string block = MoeLayer::block_prefix("layer", cfg);

  // Forward: y against the reference's output (J with one-hot upstream is y itself; compare
  // sum(y * g) minus the losses instead, which covers every element).
  double J_layer = s.aux_loss + s.z_loss;
  for (int64_t i = 0; i < N * C; ++i) J_layer += double(y.data<float>()[i]) * gd[i];
  const double J_ref = ref.objective(xd, gd, block);
  EXPECT_NEAR(J_layer, J_ref, 1e-4 * std::fabs(J_ref) + 1e-5) << what;

  const double h = 1e-5;
  auto check = [&](std::vector<double>& v, const float* grad, int64_t n, const std::string& name) {
    double max_err = 0, max_grad = 0;
    for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 17)) {
      const double saved = v[i];
      v[i] = saved + h;
      const double plus = ref.objective(xd, gd, block);
      v[i] = saved - h;
      const double minus = ref.objective(xd, gd, block);
      v[i] = saved;
      const double fd = (plus - minus) / (2 * h);
      max_err = std::max(max_err, std::fabs(fd - grad[i]));
      max_grad = std::max(max_grad, std::fabs(fd));
    }
    EXPECT_LE(max_err, 1e-3 * max_grad + 1e-5) << what << ": " << name << " max_grad " << max_grad;
    EXPECT_GT(max_grad, 0.0) << what << ": " << name;
  };
  check(xd, dx.data<float>(), N * C, "input");
  for (const Parameter& p : blk.params.all())
    check(ref.w[p.name], p.grad.data<float>(), p.numel(), p.name);

  const MoeLayerStats st = blk.layer->take_stats();
  EXPECT_EQ(st.micro_batches, 1);
  EXPECT_EQ(st.choices, N * cfg.moe.topk);
  EXPECT_EQ(std::accumulate(st.expert_count.begin(), st.expert_count.end(), int64_t{0}),
            N * cfg.moe.topk);
  if (cfg.moe.capacity_factor > 0 && cfg.moe.capacity_factor < 1) {
    EXPECT_GT(st.dropped, 0) << what;
  }
  if (cfg.moe.capacity_factor == 0) {
    EXPECT_EQ(st.dropped, 0);
  }
}

TEST(MoeLayer, SoftmaxSwigluMatchesDoubleReferenceAndFiniteDifferences) {
  check_against_reference(moe_config(true, moe::ScoreFunction::kSoftmax, false, 0, 0, false),
                          "softmax swiglu (Mixtral names)");
}

TEST(MoeLayer, PreSoftmaxGeluWithBiasesAndSharedExpert) {
  check_against_reference(moe_config(false, moe::ScoreFunction::kSoftmax, true, 6, 0, false),
                          "pre-softmax gelu shared");
}

TEST(MoeLayer, SigmoidWithExpertBiasAndSharedExpert) {
  check_against_reference(moe_config(true, moe::ScoreFunction::kSigmoid, false, 8, 0, true),
                          "sigmoid bias shared");
}

TEST(MoeLayer, CapacityDropsTokensAndGradientsFollow) {
  check_against_reference(moe_config(true, moe::ScoreFunction::kSoftmax, false, 0, 0.5f, false),
                          "capacity 0.5");
}

TEST(MoeLayer, PaddingToCapacityChangesNothingButTheRows) {
  ModelConfig c = moe_config(false, moe::ScoreFunction::kSoftmax, false, 0, 1.25f, false);
  Block plain(c);
  c.moe.pad_to_capacity = true;
  Block padded(c);
  const int64_t N = 16, C = c.hidden_size;
  Tensor x = Tensor::empty({N, C}, DType::kF32);
  for (int64_t i = 0; i < N * C; ++i) x.data<float>()[i] = std::sin(0.37 * i);
  const StepContext ctx = StepContext::make(2, 8, 0, 1, 1, true);
  MoeLayer::Saved a, b;
  const Tensor ya = plain.layer->forward(x, a, ctx), yb = padded.layer->forward(x, b, ctx);
  const int64_t cap = moe::expert_capacity(N, 2, 4, 1.25);
  EXPECT_EQ(b.perm.rows(), 4 * cap);
  EXPECT_LT(a.perm.rows(), b.perm.rows());
  for (int64_t i = 0; i < N * C; ++i) ASSERT_EQ(ya.data<float>()[i], yb.data<float>()[i]);
  const Tensor da = plain.layer->backward(x, a, ctx), db = padded.layer->backward(x, b, ctx);
  for (int64_t i = 0; i < N * C; ++i) ASSERT_EQ(da.data<float>()[i], db.data<float>()[i]);
}

TEST(MoeLayer, ExpertBiasMovesByExactlyTheRate) {
  ModelConfig c = moe_config(true, moe::ScoreFunction::kSigmoid, false, 0, 0, true);
  c.moe.bias_update_rate = 0.125f;  // a power of two: the sums are exact
  Block blk(c);
  blk.layer->update_expert_bias({10, 2, 6, 6});  // mean 6
  EXPECT_EQ(blk.layer->expert_bias(), (std::vector<float>{-0.125f, 0.125f, 0.0f, 0.0f}));
  blk.layer->update_expert_bias({0, 8, 8, 8});
  EXPECT_EQ(blk.layer->expert_bias(), (std::vector<float>{0.0f, 0.0f, -0.125f, -0.125f}));
}

TEST(MoeLayer, MixtralAndDeepSeekNames) {
  const ModelConfig mixtral = preset("mixtral-tiny");
  ParameterSet a;
  MoeLayer::declare(a, "model.layers.0", mixtral);
  EXPECT_TRUE(a.contains("model.layers.0.block_sparse_moe.gate.weight"));
  EXPECT_TRUE(a.contains("model.layers.0.block_sparse_moe.experts.7.w1.weight"));
  EXPECT_TRUE(a.contains("model.layers.0.block_sparse_moe.experts.7.w3.weight"));
  EXPECT_EQ(a.get("model.layers.0.block_sparse_moe.experts.7.w2.weight").global_shape,
            (Shape{64, 176}));
  const ModelConfig deepseek = preset("moe-tiny");
  ParameterSet b;
  MoeLayer::declare(b, "model.layers.0", deepseek);
  EXPECT_TRUE(b.contains("model.layers.0.mlp.gate.weight"));
  EXPECT_TRUE(b.contains("model.layers.0.mlp.experts.3.gate_proj.weight"));
  EXPECT_TRUE(b.contains("model.layers.0.mlp.shared_experts.down_proj.weight"));
  EXPECT_EQ(deepseek.num_active_parameters() < deepseek.num_parameters(), true);
}

TEST(MoeConfig, LayerFrequencyAndBadValues) {
  ModelConfig c = preset("mixtral-tiny");
  c.num_layers = 4;
  c.moe.layer_freq = "2";
  EXPECT_TRUE(c.is_moe_layer(0));
  EXPECT_FALSE(c.is_moe_layer(1));
  EXPECT_TRUE(c.is_moe_layer(2));
  c.moe.layer_freq = "[0,1]*2";
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(3));
  c.moe.layer_freq = "([1,1,0,1])";
  EXPECT_FALSE(c.is_moe_layer(2));
  c.moe.layer_freq = "[1,0,1]";
  EXPECT_THROW(c.validate(), Error);
  c.moe.layer_freq = "[1,2,1,1]";
  EXPECT_THROW(c.validate(), Error);
  c.moe.layer_freq = "1";
  c.moe.topk = 9;
  EXPECT_THROW(c.validate(), Error);
  c.moe.topk = 2;
  c.moe.pre_softmax = true;
  c.moe.score = moe::ScoreFunction::kSigmoid;
  EXPECT_THROW(c.validate(), Error);
  c.moe.pre_softmax = false;
  c.moe.capacity_factor = -1;
  EXPECT_THROW(c.validate(), Error);
}

}  // namespace
}  // namespace tessera::model
