#include "tessera/train/deepspeed_auto.h"

#include <cmath>
#include <functional>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/train/deepspeed_keys.h"

namespace tessera::train {
namespace {

using json = nlohmann::json;

bool is_auto(const json& v) { return v.is_string() && v.get<std::string>() == "auto"; }

// The dotted paths of every "auto" below `j`.
void find_autos(const json& j, const std::string& prefix, std::vector<std::string>& out) {
  for (const auto& [key, value] : j.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (is_auto(value)) out.push_back(path);
    if (value.is_object()) find_autos(value, path, out);
  }
}

// The node at a dotted path (nullptr when absent).
json* node_at(json& root, const std::string& path) {
  json* node = &root;
  std::istringstream parts(path);
  for (std::string part; std::getline(parts, part, '.');) {
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
  }
  return node;
}

// A whole number at `path` of the file (already resolved), if there is one.
std::optional<int64_t> file_integer(json& root, const std::string& path) {
  const json* v = node_at(root, path);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return static_cast<int64_t>(v->get<double>());
}

}  // namespace

ResolvedAuto resolve_deepspeed_auto(json& config, const TrainArgs& args, int64_t dp,
                                    const std::string& file) {
  ResolvedAuto out;
  if (!config.is_object()) return out;
  std::vector<std::string> autos;
  find_autos(config, "", autos);
  const auto fail = [&](const std::string& path, const std::string& why) -> void {
    throw Error(file + ": " + path + " is \"auto\" but " + why);
  };
  const auto need_lr = [&](const std::string& path) {
    if (args.lr < 0) fail(path, "--lr is not given (\"auto\" takes the flag's value)");
    return args.lr;
  };
  const auto hidden = [&](const std::string& path) -> int64_t {
    if (args.model.hidden_size <= 0) fail(path, "the model has no hidden size");
    return args.model.hidden_size;
  };
  const auto micro = [&] {
    return file_integer(config, "train_micro_batch_size_per_gpu").value_or(args.micro_batch_size);
  };
  const auto total_steps = [&](const std::string& path) -> int64_t {
    if (const auto t = file_integer(config, "scheduler.params.total_num_steps")) return *t;
    if (args.lr_decay_iters > 0) return args.lr_decay_iters;
    if (args.train_iters > 0) return args.train_iters;
    fail(path, "neither --lr-decay-iters nor --train-iters is given");
    return 0;
  };
  // Resolution order: a key's value may depend on keys resolved before it.
  using Rule =
      std::pair<const char*, std::function<std::pair<json, std::string>(const std::string&)>>;
  const std::vector<Rule> rules = {
      {"train_micro_batch_size_per_gpu",
       [&](const std::string&) {
         return std::pair{json(args.micro_batch_size), std::string("--micro-batch-size")};
       }},
      {"train_batch_size",
       [&](const std::string&) {
         if (args.given(&TrainArgs::global_batch_size))
           return std::pair{json(args.global_batch_size), std::string("--global-batch-size")};
         const int64_t gas = file_integer(config, "gradient_accumulation_steps").value_or(1);
         return std::pair{json(micro() * dp * gas), "micro " + std::to_string(micro()) + " x DP " +
                                                        std::to_string(dp) + " x accumulation " +
                                                        std::to_string(gas)};
       }},
      {"gradient_accumulation_steps",
       [&](const std::string& path) {
         int64_t tbs = micro() * dp;
         if (const auto t = file_integer(config, "train_batch_size"))
           tbs = *t;
         else if (args.given(&TrainArgs::global_batch_size))
           tbs = args.global_batch_size;
         if (micro() <= 0 || tbs % (micro() * dp) != 0)
           fail(path, "train_batch_size " + std::to_string(tbs) + " is not divisible by micro " +
                          std::to_string(micro()) + " x DP " + std::to_string(dp));
         return std::pair{json(tbs / (micro() * dp)), "train_batch_size " + std::to_string(tbs) +
                                                          " / (micro " + std::to_string(micro()) +
                                                          " x DP " + std::to_string(dp) + ")"};
       }},
      {"gradient_clipping",
       [&](const std::string&) {
         return std::pair{json(args.clip_grad), std::string("--clip-grad")};
       }},
      {"optimizer.params.lr",
       [&](const std::string& p) {
         return std::pair{json(need_lr(p)), std::string("--lr")};
       }},
      {"optimizer.params.betas",
       [&](const std::string&) {
         return std::pair{json::array({args.adam_beta1, args.adam_beta2}),
                          std::string("--adam-beta1, --adam-beta2")};
       }},
      {"optimizer.params.eps",
       [&](const std::string&) {
         return std::pair{json(args.adam_eps), std::string("--adam-eps")};
       }},
      {"optimizer.params.weight_decay",
       [&](const std::string&) {
         return std::pair{json(args.weight_decay), std::string("--weight-decay")};
       }},
      {"scheduler.params.warmup_min_lr",
       [&](const std::string&) {
         return std::pair{json(0.0), std::string("0, as Hugging Face: not a trainer argument")};
       }},
      {"scheduler.params.warmup_max_lr",
       [&](const std::string& p) {
         return std::pair{json(need_lr(p)), std::string("--lr")};
       }},
      {"scheduler.params.total_num_steps",
       [&](const std::string& p) {
         const int64_t t = total_steps(p);
         return std::pair{
             json(t), std::string(args.lr_decay_iters > 0 ? "--lr-decay-iters" : "--train-iters")};
       }},
      {"scheduler.params.warmup_num_steps",
       [&](const std::string& p) {
         if (args.given(&TrainArgs::lr_warmup_iters))
           return std::pair{json(args.lr_warmup_iters), std::string("--lr-warmup-iters")};
         if (args.lr_warmup_fraction >= 0)
           return std::pair{
               json(static_cast<int64_t>(std::ceil(args.lr_warmup_fraction * total_steps(p)))),
               std::string("ceil(--lr-warmup-fraction x total_num_steps), as Hugging Face's "
                           "warmup_ratio")};
         return std::pair{json(int64_t{0}), std::string("0: no --lr-warmup-iters given")};
       }},
      {"fp16.enabled",
       [&](const std::string&) {
         return std::pair{json(args.fp16), std::string("--fp16")};
       }},
      {"bf16.enabled",
       [&](const std::string&) {
         return std::pair{json(args.bf16), std::string("--bf16")};
       }},
      {"bfloat16.enabled",
       [&](const std::string&) {
         return std::pair{json(args.bf16), std::string("--bf16")};
       }},
      {"amp.enabled",
       [&](const std::string&) {
         return std::pair{json(false), std::string("no Apex AMP")};
       }},
      {"zero_optimization.reduce_bucket_size",
       [&](const std::string& p) {
         return std::pair{json(hidden(p) * hidden(p)), std::string("hidden x hidden")};
       }},
      {"zero_optimization.stage3_prefetch_bucket_size",
       [&](const std::string& p) {
         return std::pair{json(static_cast<int64_t>(0.9 * double(hidden(p) * hidden(p)))),
                          std::string("int(0.9 x hidden x hidden)")};
       }},
      {"zero_optimization.stage3_param_persistence_threshold",
       [&](const std::string& p) {
         return std::pair{json(10 * hidden(p)), std::string("10 x hidden")};
       }},
  };
  // Every "auto" must have a rule, except on keys that have no effect (never read).
  for (const std::string& path : autos) {
    const DeepSpeedKey* row = find_deepspeed_key(path);
    if (row == nullptr) continue;  // classify_deepspeed_keys reports the unknown key
    if (row->kind == DeepSpeedKeyClass::kNoEffect) continue;
    const bool has_rule =
        std::any_of(rules.begin(), rules.end(), [&](const Rule& r) { return path == r.first; });
    if (!has_rule || row->auto_from.empty())
      throw Error(file + ": " + path +
                  " is \"auto\", which Tessera cannot resolve for this key (keys that take "
                  "\"auto\" are listed by tessera-train --print-deepspeed-keys)");
  }
  for (const auto& [path, rule] : rules) {
    json* node = node_at(config, path);
    if (node == nullptr || !is_auto(*node)) continue;
    auto [value, source] = rule(path);
    *node = value;
    out.paths.insert(path);
    out.lines.push_back(std::string(path) + " \"auto\" = " + value.dump() + " (" + source + ")");
  }
  return out;
}

}  // namespace tessera::train
