#include "tessera/inference/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/core/philox.h"

namespace tessera::inference {
namespace {

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// u in [0, 1) with 53 random bits, a pure function of (seed, position).
double uniform(uint64_t seed, int64_t position) {
  const PhiloxKey key = philox_key(seed, RngPurpose::kSampling, 0);
  const std::array<uint32_t, 4> r = philox_block(key, static_cast<uint64_t>(position), 0);
  const uint64_t bits = (static_cast<uint64_t>(r[0]) << 21) ^ (r[1] >> 11);
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 0x1.0p-53;
}

}  // namespace

std::string SamplingParams::check() const {
  if (!(temperature >= 0) || !std::isfinite(temperature))
    return "temperature: must be >= 0, got " + number(temperature);
  if (top_k < 0) return "top_k: must be >= 0, got " + std::to_string(top_k);
  if (!(top_p > 0 && top_p <= 1)) return "top_p: must be in (0, 1], got " + number(top_p);
  if (!(min_p >= 0 && min_p <= 1)) return "min_p: must be in [0, 1], got " + number(min_p);
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty))
    return "repetition_penalty: must be > 0, got " + number(repetition_penalty);
  return "";
}

int32_t sample_token(std::vector<float>& logits, const SamplingParams& params,
                     std::span<const int32_t> seen, int64_t position) {
  const int64_t V = static_cast<int64_t>(logits.size());
  TESSERA_CHECK(V > 0);
  if (params.repetition_penalty != 1.0) {
    const float p = static_cast<float>(params.repetition_penalty);
    std::vector<char> done(V, 0);  // each token once, however often it occurred
    for (int32_t t : seen) {
      if (t < 0 || t >= V || done[t]) continue;
      done[t] = 1;
      logits[t] = logits[t] > 0 ? logits[t] / p : logits[t] * p;
    }
  }
  if (params.greedy())
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());

  // Candidates in descending logit order (ties by id), filtered, as probabilities in double.
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  const auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int64_t keep = V;
  if (params.top_k > 0 && params.top_k < V) {
    keep = params.top_k;
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  const double inv_t = 1.0 / params.temperature;
  const double top = static_cast<double>(logits[order[0]]) * inv_t;
  std::vector<double> prob(keep);
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) {
    prob[i] = std::exp(static_cast<double>(logits[order[i]]) * inv_t - top);
    sum += prob[i];
  }
  for (double& p : prob) p /= sum;
  if (params.top_p < 1.0) {  // the smallest prefix reaching top_p
    double cumulative = 0;
    int64_t n = 0;
    while (n < keep) {
      cumulative += prob[n++];
      if (cumulative >= params.top_p) break;
    }
    keep = n;
  }
  if (params.min_p > 0.0) {
    const double floor = params.min_p * prob[0];
    keep = std::max<int64_t>(1, std::find_if(prob.begin(), prob.begin() + keep, [&](double p) {
                                  return p < floor;
                                }) - prob.begin());
  }
  // The kept tokens in id order, renormalised; inverse CDF at u.
  std::vector<std::pair<int32_t, double>> kept(keep);
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) {
    kept[i] = {order[i], prob[i]};
    total += prob[i];
  }
  std::sort(kept.begin(), kept.end());
  const double u = uniform(params.seed, position) * total;
  double cumulative = 0;
  for (const auto& [token, p] : kept) {
    cumulative += p;
    if (u < cumulative) return token;
  }
  return kept.back().first;  // u within rounding of the total
}

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int top_n) {
  const int64_t V = static_cast<int64_t>(logits.size());
  TESSERA_CHECK(token >= 0 && token < V);
  double top = -std::numeric_limits<double>::infinity();
  for (float x : logits) top = std::max(top, static_cast<double>(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - top);
  const double log_z = top + std::log(sum);
  TokenLogprob out;
  out.logprob = static_cast<double>(logits[token]) - log_z;
  if (top_n > 0) {
    std::vector<int32_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    const int64_t n = std::min<int64_t>(top_n, V);
    std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int64_t i = 0; i < n; ++i)
      out.top.emplace_back(order[i], static_cast<double>(logits[order[i]]) - log_z);
  }
  return out;
}

}  // namespace tessera::inference
