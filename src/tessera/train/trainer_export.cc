// Trainer::export_weights: the trained model as one Hugging Face safetensors file, gathered from
// every tensor-parallel, data-parallel (sharded master weights) and pipeline shard.
#include <cstdio>
#include <filesystem>
#include <map>

#include "tessera/checkpoint/hf_export.h"
#include "tessera/distributed/gather_parameter.h"
#include "tessera/train/trainer.h"

namespace tessera::train {

void Trainer::export_weights() const {
  // Every rank of a stage takes part in gathering each of its parameters over TP (and a sharded
  // optimizer's master weights over DP); the stage's first rank keeps them. The other stages'
  // first ranks then send theirs to the reporting rank (the first stage's), in the order of
  // their declarations, which that rank recomputes.
  std::map<std::string, Tensor> full;
  // The first data-parallel rank of each expert-parallel position (its expert-DP rank 0) holds
  // that position's experts whole (gathered over TP, or whole anyway under expert TP 1); the
  // stage reporter (EP rank 0 among them) collects them.
  const bool expert_holder = (experts_whole_ || tp_.rank() == 0) && edp_rank_ == 0;
  const bool stage_reporter = tp_.rank() == 0 && dp_rank_ == 0;
  const optim::Optimizer& optimizer = optimizer_->optimizer();
  // Unsharded, the owned master is the whole flat buffer.
  Tensor flat_master = optimizer.owned_master();
  if (optimizer.sharded()) flat_master = dp_grads_->gather_owned(flat_master);
  std::vector<Tensor> mine_experts;  // this rank's experts, in declaration order
  for (const model::Parameter& p : model_->params().all()) {
    const Tensor master =
        flat_master.slice_rows(p.offset, p.offset + p.numel()).view(p.local_shape);
    Tensor t = distributed::gather_parameter(p, master, tp_);
    if (p.tied_copy) continue;
    if (stage_reporter) full[p.name] = t;
    if (p.expert && expert_holder) mine_experts.push_back(t);
  }
  model::ModelPart stage = pipeline::part_of_rank(partition_, chunk_layers_, pp_rank_);
  if (ep_size_ > 1 && expert_holder) {  // the other expert-parallel ranks' experts
    if (stage_reporter) {
      for (int q = 1; q < ep_size_; ++q) {
        model::ModelPart theirs = stage;
        theirs.ep_size = ep_size_;
        theirs.ep_rank = q;
        theirs.experts_whole = experts_whole_;
        const model::ParameterSet decl =
            model::GPTModel::declare_part(args_.model, tp_.size(), 0, theirs);
        for (const model::Parameter& p : decl.all()) {
          if (!p.expert) continue;
          Tensor t = Tensor::empty(p.global_shape, DType::kF32);
          ep_->recv(t, q).wait();
          full[p.name] = t;
        }
      }
    } else {
      for (const Tensor& t : mine_experts) ep_->send(t, 0).wait();
    }
  }
  if (stage_reporter && pp_size_ > 1) {
    // Every stage's parameters in the order declare_part gives them with all experts.
    if (reporting_rank_) {
      for (int s = 1; s < pp_size_; ++s) {
        const model::ParameterSet decl = model::GPTModel::declare_part(
            args_.model, tp_.size(), 0, pipeline::part_of_rank(partition_, chunk_layers_, s));
        for (const model::Parameter& p : decl.all()) {
          if (p.tied_copy) continue;
          Tensor t = Tensor::empty(p.global_shape, DType::kF32);
          pp_->recv(t, s).wait();
          full[p.name] = t;
        }
      }
    } else {
      const model::ParameterSet decl =
          model::GPTModel::declare_part(args_.model, tp_.size(), 0, stage);
      for (const model::Parameter& p : decl.all())
        if (!p.tied_copy) pp_->send(full.at(p.name), 0).wait();
    }
  }
  if (!reporting_rank_) return;
  const model::ParameterSet all = model::GPTModel::declare_part(args_.model, tp_.size(), 0, {});
  const auto path = std::filesystem::path(args_.export_weights);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  checkpoint::export_hf(
      args_.model, all, [&](const model::Parameter& p) { return full.at(p.name); },
      args_.export_weights);
  std::printf("> exported weights to %s (+ config.json)\n", args_.export_weights.c_str());
}

}  // namespace tessera::train
