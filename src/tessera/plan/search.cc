#include "tessera/plan/search.h"

#include <algorithm>
#include <functional>

#include "tessera/core/error.h"
#include "tessera/plan/memory_prediction.h"
#include "tessera/train/arguments.h"
#include "tessera/train/rank_layout.h"

namespace tessera::plan {
namespace {

using Flags = std::vector<std::string>;

train::TrainArgs parse(const Flags& flags) {
  std::vector<const char*> argv = {"tessera-train"};
  for (const std::string& f : flags) argv.push_back(f.c_str());
  train::TrainArgs args;
  if (!train::parse_arguments(static_cast<int>(argv.size()), argv.data(), args))
    throw Error("the flags ask for help or a listing, not a run");
  return args;
}

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// One searched dimension: its choices as flag lists (one empty list: the user's or the default).
using Choices = std::vector<Flags>;

struct Layout {
  int tp = 1, cp = 1, pp = 1;
  Flags flags;
  std::string summary;
};

// The context-parallel sizes of `ranks` ranks (N / (TP PP)) the sequence admits (it must divide
// into 2 CP chunks), or the user's; each with the user's --cp-comm-type (default p2p).
std::vector<int> context_sizes(const train::TrainArgs& user, int ranks) {
  // (--ds-sequence-parallel-size sets it too.)
  if (user.given(&train::TrainArgs::context_parallel_size) || user.context_parallel_size > 1)
    return {user.context_parallel_size};
  std::vector<int> out;
  for (int cp : divisors(ranks))
    if (user.model.seq_length % (2 * cp) == 0) out.push_back(cp);
  return out;
}

// The expert-parallel sizes of an MoE model: divisors of DP x CP (`ranks`) that divide the
// experts, or the user's; 1 for a dense model.
std::vector<int> expert_sizes(const train::TrainArgs& user, int ranks) {
  if (user.given(&train::TrainArgs::expert_model_parallel_size) || !user.model.moe.enabled())
    return {user.expert_model_parallel_size};
  std::vector<int> out;
  for (int ep : divisors(ranks))
    if (user.model.moe.num_experts % ep == 0) out.push_back(ep);
  return out;
}

// The parallel layouts of N ranks the model admits, as flags, honouring those the user fixed.
std::vector<Layout> parallel_layouts(const train::TrainArgs& user, int N) {
  const model::ModelConfig& m = user.model;
  const bool fixed_tp = user.given(&train::TrainArgs::tensor_model_parallel_size);
  const bool fixed_sp = user.given(&train::TrainArgs::sequence_parallel);
  const bool fixed_pp = user.given(&train::TrainArgs::pipeline_model_parallel_size);
  const bool fixed_v = user.given(&train::TrainArgs::num_layers_per_virtual_stage) ||
                       user.given(&train::TrainArgs::pipeline_schedule);
  std::vector<Layout> out;
  for (int tp : divisors(N)) {
    if (fixed_tp && tp != user.tensor_model_parallel_size) continue;
    if (m.num_attention_heads % tp != 0) continue;
    for (int pp : divisors(N / tp)) {
      if (fixed_pp && pp != user.pipeline_model_parallel_size) continue;
      if (m.num_layers % pp != 0) continue;
      std::vector<int> virtual_stages = {1};
      if (!fixed_v && pp > 1 && m.num_layers % (2 * pp) == 0) virtual_stages.push_back(2);
      std::vector<bool> sp_choices = {false};
      if (tp > 1 && !fixed_sp) sp_choices.push_back(true);
      if (tp > 1 && fixed_sp) sp_choices = {user.sequence_parallel};
      for (int cp : context_sizes(user, N / (tp * pp)))
        for (int ep : expert_sizes(user, N / (tp * pp)))
          if ((N / (tp * pp)) % cp == 0)  // (a CP size the user fixed may not divide)
            for (int v : virtual_stages)
              for (bool sp : sp_choices) {
                Layout l{tp, cp, pp, {}, {}};
                if (!fixed_tp)
                  l.flags.insert(l.flags.end(),
                                 {"--tensor-model-parallel-size", std::to_string(tp)});
                if (sp && !fixed_sp) l.flags.push_back("--sequence-parallel");
                if (cp != user.context_parallel_size)
                  l.flags.insert(l.flags.end(), {"--context-parallel-size", std::to_string(cp)});
                if (!user.given(&train::TrainArgs::expert_model_parallel_size) && ep > 1)
                  l.flags.insert(l.flags.end(),
                                 {"--expert-model-parallel-size", std::to_string(ep)});
                if (!fixed_pp)
                  l.flags.insert(l.flags.end(),
                                 {"--pipeline-model-parallel-size", std::to_string(pp)});
                if (v > 1)
                  l.flags.insert(l.flags.end(), {"--num-layers-per-virtual-pipeline-stage",
                                                 std::to_string(m.num_layers / (pp * v))});
                l.summary = "TP " + std::to_string(tp) + (sp ? " SP" : "") +
                            (cp > 1 ? ", CP " + std::to_string(cp) : "") + ", PP " +
                            std::to_string(pp) + (v > 1 ? " V " + std::to_string(v) : "") +
                            ", DP " + std::to_string(N / (tp * cp * pp)) +
                            (ep > 1 ? ", EP " + std::to_string(ep) : "");
                out.push_back(l);
              }
    }
  }
  return out;
}

Choices micro_batches(const train::TrainArgs& user, int dp, std::vector<std::string>& names) {
  Choices c;
  if (user.given(&train::TrainArgs::micro_batch_size)) {
    names.push_back("mbs " + std::to_string(user.micro_batch_size));
    return {{}};
  }
  const int64_t per_rank = user.global_batch_size / dp;
  for (int64_t b = 1; b <= per_rank && b <= 64; b *= 2)
    if (per_rank % b == 0) {
      c.push_back({"--micro-batch-size", std::to_string(b)});
      names.push_back("mbs " + std::to_string(b));
    }
  return c;
}

Choices zero_stages(const train::TrainArgs& user, int dp, std::vector<std::string>& names) {
  if (user.given(&train::TrainArgs::zero_stage) ||
      user.given(&train::TrainArgs::use_distributed_optimizer) || user.deepspeed) {
    names.push_back("ZeRO " + std::to_string(user.zero_stage));
    return {{}};
  }
  Choices c;
  for (int z = 0; z <= (dp > 1 ? 3 : 0); ++z) {
    c.push_back({"--zero-stage", std::to_string(z)});
    names.push_back("ZeRO " + std::to_string(z));
  }
  return c;
}

Choices recomputation(const train::TrainArgs& user, std::vector<std::string>& names) {
  if (user.given(&train::TrainArgs::recompute_granularity) ||
      user.given(&train::TrainArgs::recompute_activations)) {
    names.push_back("recompute " + (user.recompute_granularity.empty()
                                        ? std::string("selective")
                                        : user.recompute_granularity));
    return {{}};
  }
  names = {"recompute none", "recompute selective", "recompute full"};
  return {{},
          {"--recompute-granularity", "selective"},
          {"--recompute-granularity", "full", "--recompute-method", "uniform",
           "--recompute-num-layers", "1"}};
}

}  // namespace

SearchResult search_layouts(const Flags& user_flags, int N, const MachineDescription& machine) {
  train::TrainArgs user = parse(user_flags);
  if (user.global_batch_size == 0)
    throw Error("the search needs --global-batch-size (the batch every layout must train)");
  const HostConfiguration& conf = machine.configuration_for_job(N);
  SearchResult out;
  out.memory_per_rank = machine.memory_per_host_bytes / conf.ranks_per_host;
  double smallest = -1;
  for (const Layout& layout : parallel_layouts(user, N)) {
    const int dp = N / (layout.tp * layout.cp * layout.pp);
    std::vector<std::string> mbs_names, zero_names, recompute_names;
    const Choices mbs = micro_batches(user, dp, mbs_names);
    const Choices zero = zero_stages(user, dp * layout.cp, zero_names);  // ZeRO shards over DP x CP
    const Choices recompute = recomputation(user, recompute_names);
    for (size_t b = 0; b < mbs.size(); ++b)
      for (size_t z = 0; z < zero.size(); ++z)
        for (size_t r = 0; r < recompute.size(); ++r) {
          ++out.considered;
          Candidate c;
          c.flags = layout.flags;
          for (const Flags* part : {&mbs[b], &zero[z], &recompute[r]})
            c.flags.insert(c.flags.end(), part->begin(), part->end());
          c.summary = layout.summary + ", " + mbs_names[b] + ", " + zero_names[z] + ", " +
                      recompute_names[r];
          Flags all = user_flags;
          all.insert(all.end(), c.flags.begin(), c.flags.end());
          try {
            train::TrainArgs args = parse(all);
            const comm::MeshLayout mesh = train::prepare_layout(args, N);
            const std::vector<train::RankLayout> ranks =
                train::rank_layouts(args, mesh, conf.threads_per_rank);
            for (const train::RankLayout& rank : ranks)
              c.peak_bytes =
                  std::max(c.peak_bytes, predict_rank_memory(args.model, rank).peak_bytes);
            c.time = predict_step_time(args.model, mesh, ranks, machine);
            c.mfu = predicted_mfu(args.model, args.global_batch_size, N, c.time, machine,
                                  ranks[0].compute);
          } catch (const Error& e) {
            if (out.refused++ == 0) out.first_refusal = c.summary + ": " + e.what();
            continue;
          }
          if (smallest < 0 || c.peak_bytes < smallest) {
            smallest = c.peak_bytes;
            out.smallest = c;
          }
          if (c.peak_bytes > out.memory_per_rank) {
            ++out.too_big;
            continue;
          }
          out.ranked.push_back(std::move(c));
        }
  }
  if (out.considered == 0) {
    // The user's own flags exclude every layout: tessera-train's own check says why, else the
    // model's sizes do.
    train::TrainArgs args = parse(user_flags);
    train::prepare_layout(args, N);
    throw Error("no layout of " + std::to_string(N) +
                " ranks divides the model as the flags fix it (tensor-parallel sizes must divide "
                "the attention heads, pipeline sizes the layers)");
  }
  std::stable_sort(
      out.ranked.begin(), out.ranked.end(),
      [](const Candidate& a, const Candidate& b) { return a.time.step_s < b.time.step_s; });
  return out;
}

}  // namespace tessera::plan
