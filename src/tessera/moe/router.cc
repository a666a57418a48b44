#include "tessera/moe/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "tessera/core/error.h"

namespace tessera::moe {
namespace {

// Softmax of one token's E logits, in double.
void softmax_row(const float* logits, int E, std::vector<double>& p) {
  p.resize(E);
  double max = logits[0];
  for (int e = 1; e < E; ++e) max = std::max(max, static_cast<double>(logits[e]));
  double sum = 0;
  for (int e = 0; e < E; ++e) sum += p[e] = std::exp(logits[e] - max);
  for (int e = 0; e < E; ++e) p[e] /= sum;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The k largest of `key` (ties: lower index first), in descending order.
void top_k(const std::vector<double>& key, int k, std::vector<int>& chosen) {
  chosen.resize(key.size());
  std::iota(chosen.begin(), chosen.end(), 0);
  std::partial_sort(chosen.begin(), chosen.begin() + k, chosen.end(),
                    [&](int a, int b) { return key[a] > key[b] || (key[a] == key[b] && a < b); });
  chosen.resize(k);
}

}  // namespace

void RouterConfig::validate() const {
  if (num_experts < 1)
    throw Error("--num-experts must be >= 1, got " + std::to_string(num_experts));
  if (topk < 1 || topk > num_experts)
    throw Error("--moe-router-topk " + std::to_string(topk) + " must be between 1 and " +
                "--num-experts " + std::to_string(num_experts));
  if (pre_softmax && score != ScoreFunction::kSoftmax)
    throw Error("--moe-router-pre-softmax goes with --moe-router-score-function softmax only");
}

Routing routing_slice(const Routing& r, int64_t begin, int64_t end, int num_experts) {
  Routing out;
  out.tokens = end - begin;
  out.topk = r.topk;
  out.experts.assign(r.experts.begin() + begin * r.topk, r.experts.begin() + end * r.topk);
  out.weights.assign(r.weights.begin() + begin * r.topk, r.weights.begin() + end * r.topk);
  out.expert_count.assign(num_experts, 0);
  for (int32_t e : out.experts) ++out.expert_count[e];
  return out;
}

Routing route(const float* logits, int64_t T, const RouterConfig& cfg, const float* expert_bias) {
  cfg.validate();
  const int E = cfg.num_experts, k = cfg.topk;
  Routing r;
  r.tokens = T;
  r.topk = k;
  r.experts.resize(T * k);
  r.weights.resize(T * k);
  r.expert_count.assign(E, 0);
  std::vector<double> key(E), sig(E), w(k);  // per token, reused
  std::vector<int> chosen;
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * E;
    if (cfg.score == ScoreFunction::kSigmoid) {
      for (int e = 0; e < E; ++e)
        key[e] = (sig[e] = sigmoid(l[e])) + (expert_bias ? expert_bias[e] : 0.0);
    } else if (cfg.pre_softmax) {
      softmax_row(l, E, key);
    } else {
      for (int e = 0; e < E; ++e) key[e] = l[e];
    }
    top_k(key, k, chosen);
    if (cfg.score == ScoreFunction::kSigmoid) {
      double sum = 0;
      for (int a = 0; a < k; ++a) sum += w[a] = sig[chosen[a]];
      for (double& x : w) x /= sum;
    } else if (cfg.pre_softmax) {
      for (int a = 0; a < k; ++a) w[a] = key[chosen[a]];
    } else {
      // Softmax over the chosen logits; chosen[0] holds the largest.
      double sum = 0;
      for (int a = 0; a < k; ++a) sum += w[a] = std::exp(double(l[chosen[a]]) - l[chosen[0]]);
      for (double& x : w) x /= sum;
    }
    for (int a = 0; a < k; ++a) {
      r.experts[t * k + a] = chosen[a];
      r.weights[t * k + a] = static_cast<float>(w[a] * cfg.topk_scaling);
      ++r.expert_count[chosen[a]];
    }
  }
  return r;
}

void route_backward(float* dlogits, const float* logits, const Routing& r, const float* dweights,
                    const RouterConfig& cfg) {
  const int E = cfg.num_experts, k = r.topk;
  const double s = cfg.topk_scaling;
  std::vector<double> p, chosen(k), gj(E);  // per token, reused
  for (int64_t t = 0; t < r.tokens; ++t) {
    const float* l = logits + t * E;
    float* dl = dlogits + t * E;
    const int32_t* ex = r.experts.data() + t * k;
    const float* g = dweights + t * k;
    if (cfg.score == ScoreFunction::kSigmoid) {
      // w_a = s sigma_a / S, S = sum_b sigma_b: dw_a/dsigma_c = s (delta_ac / S - sigma_a / S^2).
      std::vector<double>& sig = chosen;
      double S = 0, gs = 0;
      for (int a = 0; a < k; ++a) S += sig[a] = sigmoid(l[ex[a]]);
      for (int a = 0; a < k; ++a) gs += g[a] * sig[a];
      for (int c = 0; c < k; ++c) {
        const double dsig = s * (g[c] / S - gs / (S * S));
        dl[ex[c]] += static_cast<float>(dsig * sig[c] * (1.0 - sig[c]));
      }
    } else if (cfg.pre_softmax) {
      // w_a = s P_{e_a}: dl_j = s (g_j P_j - P_j sum_a g_a P_{e_a}), g_j = 0 off the chosen.
      softmax_row(l, E, p);
      double gp = 0;
      for (int a = 0; a < k; ++a) gp += g[a] * p[ex[a]];
      std::fill(gj.begin(), gj.end(), 0.0);
      for (int a = 0; a < k; ++a) gj[ex[a]] = g[a];
      for (int j = 0; j < E; ++j) dl[j] += static_cast<float>(s * p[j] * (gj[j] - gp));
    } else {
      // w = s softmax(l_chosen): dl_{e_a} = s q_a (g_a - sum_b q_b g_b), q the unscaled weights.
      std::vector<double>& q = chosen;
      double sum = 0;
      for (int a = 0; a < k; ++a) sum += q[a] = std::exp(double(l[ex[a]]) - l[ex[0]]);
      double gq = 0;
      for (int a = 0; a < k; ++a) gq += (q[a] /= sum) * g[a];
      for (int a = 0; a < k; ++a) dl[ex[a]] += static_cast<float>(s * q[a] * (g[a] - gq));
    }
  }
}

double aux_loss(const float* logits, const Routing& r, const RouterConfig& cfg, double coeff,
                float* dlogits, const int64_t* counts, int64_t total_tokens) {
  const int E = cfg.num_experts, k = r.topk;
  const int64_t T = r.tokens, Tall = total_tokens > 0 ? total_tokens : T;
  const int64_t* n = counts != nullptr ? counts : r.expert_count.data();
  if (T == 0) return 0.0;
  const double c = coeff * E / (static_cast<double>(k) * Tall * Tall);
  std::vector<double> p(E);
  double loss = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * E;
    double S = 0;  // sigmoid: the sum that normalises P
    if (cfg.score == ScoreFunction::kSigmoid) {
      for (int e = 0; e < E; ++e) S += p[e] = sigmoid(l[e]);
      for (double& x : p) x /= S;
    } else {
      softmax_row(l, E, p);
    }
    double np = 0;  // sum_i n_i P_i for this token
    for (int e = 0; e < E; ++e) np += n[e] * p[e];
    loss += np;
    if (!dlogits) continue;
    float* dl = dlogits + t * E;
    if (cfg.score == ScoreFunction::kSigmoid) {
      // P_i = sigma_i / S: dP_i/dl_j = sigma_j (1 - sigma_j) (delta_ij - P_i) / S.
      for (int j = 0; j < E; ++j) {
        const double sj = p[j] * S;
        dl[j] += static_cast<float>(c * sj * (1.0 - sj) / S * (n[j] - np));
      }
    } else {
      // dP_i/dl_j = P_i (delta_ij - P_j): d(sum_i n_i P_i)/dl_j = P_j (n_j - sum_i n_i P_i).
      for (int j = 0; j < E; ++j)
        dl[j] += static_cast<float>(c * p[j] * (n[j] - np));
    }
  }
  return c * loss;
}

double z_loss(const float* logits, int64_t T, int E, double coeff, float* dlogits,
              int64_t total_tokens) {
  if (T == 0) return 0.0;
  const int64_t Tall = total_tokens > 0 ? total_tokens : T;
  std::vector<double> p;
  double loss = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * E;
    double max = l[0];
    for (int e = 1; e < E; ++e) max = std::max(max, double(l[e]));
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(l[e] - max);
    const double lse = max + std::log(sum);
    loss += lse * lse;
    if (!dlogits) continue;
    softmax_row(l, E, p);
    for (int e = 0; e < E; ++e)
      dlogits[t * E + e] += static_cast<float>(coeff * 2.0 * lse * p[e] / Tall);
  }
  return coeff * loss / Tall;
}

}  // namespace tessera::moe
