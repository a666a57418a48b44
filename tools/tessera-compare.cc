// tessera-compare: the comparison half of the layout-invariance harness. Checks a run's
// per-iteration metrics (--metrics-file JSON lines) and final weights (--export-weights
// safetensors) against a reference run, normally the single-process run of the same flags.
//
//   tessera-compare --reference-metrics REF.jsonl --metrics RUN.jsonl
//                   --reference-weights REF.safetensors --weights RUN.safetensors
//                   [--loss-rtol 1e-5] [--grad-norm-rtol 1e-5] [--weight-rtol 1e-5]
//                   [--weight-atol 1e-6] [--weight-mean-atol X]
//
// Metrics: every iteration's lm_loss, grad_norm and (when it evaluated) val_loss within the
// relative tolerance of the reference's (val_loss with the loss tolerance); loss_scale and the
// skipped flag (overflow) exactly equal; val_loss present on the same iterations. NaN (null in
// the file) never matches, not even a NaN in the reference: two diverged runs are not equal; only
// the norms of iterations both runs skipped are not compared. Weights: the same tensor names and
// shapes, every element within max(weight-atol, weight-rtol * |reference|), and, when
// --weight-mean-atol is given, every tensor's mean absolute difference at most X (bf16 and fp16
// runs, see docs/distributed.md: a tensor whose update is wrong as a whole shows there even when
// each element stays within the per-element bound). Prints the largest differences found and
// where (relative for the metrics; relative and absolute for the weights, and the mean of the
// worst tensor), then exits 0 when everything is within tolerance, 1 when not, 2 on bad input
// (unreadable files, different iteration counts or tensor sets).
//
//   tessera-compare --localize A B [--localize-rtol 1e-3]
//
// Two --dump-numerics directories: prints the first (iteration, micro-batch, forward or backward,
// layer, tensor) where the runs differ, exactly for runs of the same layout, else beyond the
// relative tolerance (numerics/numerics_diff.h), with both runs' figures; exits 1 when they part,
// 0 when they do not ("no divergence"), 2 on bad input.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/tool_main.h"
#include "tessera/kernels/build_info.h"
#include "tessera/numerics/numerics_diff.h"

namespace {

using tessera::Error;
namespace ckpt = tessera::checkpoint;

struct IterationValues {
  int64_t iteration;
  double lm_loss, grad_norm;
  double loss_scale;
  bool skipped;
  bool evaluated;   // the line has a val_loss
  double val_loss;  // as read; NaN if the file says null or NaN
};

std::vector<IterationValues> read_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open the metrics file");
  std::vector<IterationValues> out;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      // A skipped (overflowed) iteration has no finite norm: null in the file, NaN here.
      const auto number = [&](const char* key) {
        const auto& v = j.at(key);
        return v.is_null() ? std::nan("") : v.get<double>();
      };
      out.push_back({j.at("iteration").get<int64_t>(), number("lm_loss"), number("grad_norm"),
                     number("loss_scale"), j.at("skipped").get<bool>(), j.contains("val_loss"),
                     j.contains("val_loss") ? number("val_loss") : std::nan("")});
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ":" + std::to_string(line_no) + ": not a metrics line (" + e.what() + ")");
    }
  }
  if (out.empty()) throw Error(path + ": no iterations");
  return out;
}

// NaN never equals NaN: a NaN on either side is the worst difference (NaN), so two runs that
// both diverged do not compare equal. Identical infinities do.
double relative(double got, double want) {
  if (std::isnan(got) || std::isnan(want)) return std::nan("");
  if (got == want) return 0.0;
  return std::fabs(got - want) / std::max(std::fabs(want), 1e-30);
}

// The largest difference (of a metric, relative; of weights, relative or absolute) and where it
// occurs.
struct Worst {
  double value = 0;
  std::string where;
  void update(double r, const std::string& w) {
    if (std::isnan(value)) return;  // a NaN stays the worst: nothing compares above it
    if (!(r <= value)) {            // NaN counts as worst
      value = r;
      where = w;
    }
  }
};

bool compare_metrics(const std::string& ref_path, const std::string& run_path, double loss_rtol,
                     double norm_rtol) {
  const auto ref = read_metrics(ref_path), run = read_metrics(run_path);
  if (ref.size() != run.size())
    throw Error(run_path + ": " + std::to_string(run.size()) + " iterations, the reference " +
                ref_path + " has " + std::to_string(ref.size()));
  Worst loss, norm, val;
  int evaluations = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (ref[i].iteration != run[i].iteration)
      throw Error(run_path + ": line " + std::to_string(i + 1) + " is iteration " +
                  std::to_string(run[i].iteration) + ", the reference's is " +
                  std::to_string(ref[i].iteration));
    const std::string at = "iteration " + std::to_string(ref[i].iteration);
    loss.update(relative(run[i].lm_loss, ref[i].lm_loss), at);
    // A skipped (overflowed) iteration has no norm in either run (checked below that both
    // skipped it); every other norm is compared.
    if (!(run[i].skipped && ref[i].skipped))
      norm.update(relative(run[i].grad_norm, ref[i].grad_norm), at);
    if (run[i].evaluated != ref[i].evaluated) {
      std::printf("val loss: %s evaluated in only one of the runs MISMATCH\n", at.c_str());
      return false;
    }
    if (ref[i].evaluated) {
      val.update(relative(run[i].val_loss, ref[i].val_loss), at);
      ++evaluations;
    }
    if (run[i].skipped != ref[i].skipped || run[i].loss_scale != ref[i].loss_scale) {
      std::printf("loss scale / skipped: %s differs (run %.17g%s, reference %.17g%s) MISMATCH\n",
                  at.c_str(), run[i].loss_scale, run[i].skipped ? " skipped" : "",
                  ref[i].loss_scale, ref[i].skipped ? " skipped" : "");
      return false;
    }
  }
  // Written as "<=" so that a NaN (worst) difference fails.
  const bool ok = loss.value <= loss_rtol && norm.value <= norm_rtol && val.value <= loss_rtol;
  std::printf("lm loss:   max relative difference %.3e over %zu iterations (%s; tolerance %.1e) %s\n",
              loss.value, ref.size(), loss.where.c_str(), loss_rtol,
              loss.value <= loss_rtol ? "ok" : "EXCEEDED");
  std::printf("grad norm: max relative difference %.3e over %zu iterations (%s; tolerance %.1e) %s\n",
              norm.value, ref.size(), norm.where.c_str(), norm_rtol,
              norm.value <= norm_rtol ? "ok" : "EXCEEDED");
  if (evaluations > 0)
    std::printf("val loss:  max relative difference %.3e over %d evaluations (%s; tolerance %.1e) %s\n",
                val.value, evaluations, val.where.c_str(), loss_rtol,
                val.value <= loss_rtol ? "ok" : "EXCEEDED");
  std::printf("loss scale and skipped iterations: identical\n");
  return ok;
}

std::vector<float> as_f32(const ckpt::SafetensorsFile& f, const std::string& name) {
  const ckpt::SafeTensorInfo& info = f.info(name);
  std::vector<float> out(info.numel);
  const void* data = f.data(name);
  tessera::visit_float(ckpt::to_core_dtype(info.dtype), [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(data);
    for (int64_t i = 0; i < info.numel; ++i) out[i] = tessera::to_f32(p[i]);
  });
  return out;
}

bool compare_weights(const std::string& ref_path, const std::string& run_path, double rtol,
                     double atol, double mean_atol) {
  const ckpt::SafetensorsFile ref(ref_path), run(run_path);
  if (ref.names() != run.names())
    throw Error(run_path + ": its tensor names differ from the reference " + ref_path);
  Worst worst, worst_abs, worst_tensor;  // relative, absolute, a tensor's mean absolute
  int64_t elements = 0, outside = 0;
  double sum_abs = 0;
  for (const std::string& name : ref.names()) {
    if (ref.info(name).shape != run.info(name).shape)
      throw Error(run_path + ": tensor " + name + " has another shape than in " + ref_path);
    const auto a = as_f32(run, name), b = as_f32(ref, name);
    double tensor_sum = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      const double diff = std::fabs(double(a[i]) - double(b[i]));
      tensor_sum += diff;
      if (!(diff <= std::max(atol, rtol * std::fabs(double(b[i]))))) ++outside;
      // Relative to the element, but not below atol's scale, so that elements crossing zero
      // do not dominate the report.
      const std::string where = name + "[" + std::to_string(i) + "]";
      worst.update(diff / std::max(std::fabs(double(b[i])), atol / rtol), where);
      worst_abs.update(diff, where);
    }
    sum_abs += tensor_sum;
    if (!b.empty()) worst_tensor.update(tensor_sum / double(b.size()), name);
    elements += static_cast<int64_t>(b.size());
  }
  std::printf("weights:   max relative difference %.3e over %lld elements of %zu tensors (%s); "
              "%lld outside max(%.1e, %.1e x |ref|) %s\n",
              worst.value, static_cast<long long>(elements), ref.names().size(),
              worst.where.c_str(), static_cast<long long>(outside), atol, rtol,
              outside == 0 ? "ok" : "EXCEEDED");
  std::printf("weights:   max absolute difference %.3e (%s)\n", worst_abs.value,
              worst_abs.where.c_str());
  const double mean = elements > 0 ? sum_abs / double(elements) : 0.0;
  // Written as "<=" so that a NaN (worst) mean fails.
  const bool mean_ok = mean_atol <= 0 || worst_tensor.value <= mean_atol;
  std::printf("weights:   mean absolute difference %.3e overall, %.3e in the worst tensor (%s)",
              mean, worst_tensor.value, worst_tensor.where.c_str());
  if (mean_atol > 0)
    std::printf("; tolerance %.1e per tensor %s", mean_atol, mean_ok ? "ok" : "EXCEEDED");
  std::printf("\n");
  return outside == 0 && mean_ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string ref_metrics, metrics, ref_weights, weights;
  double loss_rtol = 1e-5, norm_rtol = 1e-5, weight_rtol = 1e-5, weight_atol = 1e-6;
  double weight_mean_atol = 0;
  CLI::App app{"Compare a run's metrics and final weights with a reference run."};
  app.set_version_flag("--version", tessera::kernels::version_line);
  std::vector<std::string> localize;
  double localize_rtol = 1e-3;
  app.add_option("--reference-metrics", ref_metrics, "reference --metrics-file");
  app.add_option("--metrics", metrics, "this run's --metrics-file");
  app.add_option("--localize", localize,
                 "two --dump-numerics directories A B: where the runs part")
      ->expected(2);
  app.add_option("--localize-rtol", localize_rtol,
                 "--localize between different layouts: relative tolerance")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--reference-weights", ref_weights, "reference --export-weights file");
  app.add_option("--weights", weights, "this run's --export-weights file");
  app.add_option("--loss-rtol", loss_rtol)->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--grad-norm-rtol", norm_rtol)->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--weight-rtol", weight_rtol)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--weight-atol", weight_atol)->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--weight-mean-atol", weight_mean_atol,
                 "bound on every tensor's mean |difference| (0: none)")
      ->check(CLI::NonNegativeNumber);
  return tessera::run_tool(app, argc, argv, "tessera-compare", [&] {
    if (!localize.empty()) {
      namespace nm = tessera::numerics;
      const nm::NumericsRun a = nm::read_numerics(localize[0]), b = nm::read_numerics(localize[1]);
      const nm::Divergence d = nm::localize(a, b, localize_rtol);
      const std::string how = d.exact ? "exactly (same layout " + a.layout + ")"
                                      : "within relative " + std::to_string(localize_rtol) +
                                            " (layouts " + a.layout + " and " + b.layout + ")";
      if (!d.found) {
        std::printf("no divergence: %lld records compared %s\n",
                    static_cast<long long>(d.compared), how.c_str());
        return 0;
      }
      std::printf("first divergence: %s\n  %s\n(%lld records compared %s)\n", d.where.c_str(),
                  d.detail.c_str(), static_cast<long long>(d.compared), how.c_str());
      return 1;
    }
    if (ref_metrics.empty() || metrics.empty())
      throw Error("--reference-metrics and --metrics are required (or --localize A B)");
    if (ref_weights.empty() != weights.empty())
      throw Error("--reference-weights and --weights go together");
    bool ok = compare_metrics(ref_metrics, metrics, loss_rtol, norm_rtol);
    if (!weights.empty()) ok = compare_weights(ref_weights, weights, weight_rtol, weight_atol, weight_mean_atol) && ok;
    return ok ? 0 : 1;
  });
}
