// The Mixture-of-Experts router's arithmetic (Megatron-Core `moe/router.py`, `moe_utils.py`):
// from the router logits (T tokens x E experts, fp32, computed by the caller as x W_r) to each
// token's k experts and their weights, the Switch load-balancing loss and the ST-MoE z-loss,
// each with its backward. Computed in double internally where sums are taken, so the results do
// not depend on how tokens are split later (the layout-invariance promise): the caller passes one
// micro-batch's tokens, never a shard of them.
//
// Score functions:
//   softmax (default): top-k on the logits, weights = softmax over the k chosen logits;
//   softmax with pre_softmax: softmax over all E, then top-k of those probabilities, not
//     renormalised;
//   sigmoid: top-k on sigmoid(logit) + expert_bias (the bias only chooses: DeepSeek-V3's
//     aux-loss-free balancing), weights = the chosen sigmoids divided by their sum.
// Weights are then multiplied by topk_scaling. Ties in top-k go to the lower expert index.
// The MoE block (model/moe_layer.h) calls these over one micro-batch's tokens.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::moe {

enum class ScoreFunction { kSoftmax, kSigmoid };

struct RouterConfig {
  int num_experts = 0;  // E
  int topk = 2;         // k, 1 <= k <= E
  ScoreFunction score = ScoreFunction::kSoftmax;
  bool pre_softmax = false;  // softmax only
  float topk_scaling = 1.0f;
  // Checks 1 <= k <= E and that pre_softmax goes with softmax; tessera::Error naming the flag.
  void validate() const;
};

// Each token's k experts (in descending score order) and weights, row-major (T, k), and how
// many tokens each expert received.
struct Routing {
  int64_t tokens = 0;
  int topk = 0;
  std::vector<int32_t> experts;       // (T, k)
  std::vector<float> weights;         // (T, k)
  std::vector<int64_t> expert_count;  // (E)
};

// The routing of tokens [begin, end) of `r`, with that slice's expert counts (sequence-level
// aux loss).
Routing routing_slice(const Routing& r, int64_t begin, int64_t end, int num_experts);

// `expert_bias` (E, sigmoid only) may be nullptr.
Routing route(const float* logits, int64_t T, const RouterConfig& cfg,
              const float* expert_bias = nullptr);
// dlogits (T, E) += d(sum of weights * dweights)/d(logits) for the routing `r` made from `logits`.
void route_backward(float* dlogits, const float* logits, const Routing& r, const float* dweights,
                    const RouterConfig& cfg);

// Switch load-balancing loss coeff * E / (k T^2) * sum_i n_i * sum_x P(x, i), where P is the
// softmax over all E of each token's logits (sigmoid: the sigmoids normalised per token) and
// n_i the expert counts of `r`. Equals coeff at uniform routing. With dlogits, += its gradient
// (the counts are constants, as in Megatron). When the T tokens of `r` are part of a larger set
// (context parallelism: a rank's share of the micro-batch), `counts` (E) and `total_tokens` are
// the whole set's n_i and T, and the result is this part's share of the loss (the parts' shares
// sum to the whole set's loss; their gradients are the whole loss's).
double aux_loss(const float* logits, const Routing& r, const RouterConfig& cfg, double coeff,
                float* dlogits = nullptr, const int64_t* counts = nullptr,
                int64_t total_tokens = 0);
// ST-MoE z-loss coeff * mean over tokens of logsumexp(logits)^2; with dlogits, += its gradient.
// With total_tokens > 0 the mean is over that many tokens (these T being a share of them).
double z_loss(const float* logits, int64_t T, int E, double coeff, float* dlogits = nullptr,
              int64_t total_tokens = 0);

}  // namespace tessera::moe
