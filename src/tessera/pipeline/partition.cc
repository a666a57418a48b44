#include "tessera/pipeline/partition.h"

#include <string>

#include "tessera/core/error.h"
#include "tessera/pipeline/schedule.h"

namespace tessera::pipeline {

int virtual_stages_for(int num_layers, int pp_size, int layers_per_virtual_stage) {
  if (layers_per_virtual_stage <= 0) return 1;
  if (num_layers % (pp_size * layers_per_virtual_stage) != 0)
    throw Error("--num-layers " + std::to_string(num_layers) +
                " is not divisible by --pipeline-model-parallel-size " + std::to_string(pp_size) +
                " x --num-layers-per-virtual-pipeline-stage " +
                std::to_string(layers_per_virtual_stage));
  return num_layers / (pp_size * layers_per_virtual_stage);
}

std::vector<int> partition_layers(const PartitionOptions& o) {
  const int L = o.num_layers, P = o.pp_size, V = o.virtual_stages;
  const std::string sizes = " (--num-layers " + std::to_string(L) +
                            ", --pipeline-model-parallel-size " + std::to_string(P) + ")";
  if (P > L)
    throw Error("--pipeline-model-parallel-size " + std::to_string(P) + " is larger than the " +
                std::to_string(L) + " layers: every pipeline stage needs at least one layer");
  const bool uneven = o.first_stage_layers >= 0 || o.last_stage_layers >= 0;
  if (!uneven) {
    if (L % (V * P) != 0)
      throw Error(V == 1 ? "--num-layers " + std::to_string(L) +
                               " is not divisible by --pipeline-model-parallel-size " +
                               std::to_string(P) +
                               " (or give --decoder-first/last-pipeline-num-layers)"
                         : "--num-layers " + std::to_string(L) + " is not divisible by " +
                               std::to_string(V * P) + " = " + std::to_string(V) +
                               " virtual stages x " + std::to_string(P) +
                               " pipeline stages (--num-layers-per-virtual-pipeline-stage)");
    return std::vector<int>(V * P, L / (V * P));
  }
  if (V != 1)
    throw Error(
        "--decoder-first/last-pipeline-num-layers cannot be combined with virtual "
        "pipeline stages (--num-layers-per-virtual-pipeline-stage)");
  if (P == 1)
    throw Error("--decoder-first/last-pipeline-num-layers need --pipeline-model-parallel-size > 1");
  std::vector<int> counts(P, 0);
  int rest = L, middle = P;
  if (o.first_stage_layers >= 0) {
    counts[0] = o.first_stage_layers;
    rest -= o.first_stage_layers;
    --middle;
  }
  if (o.last_stage_layers >= 0) {
    counts[P - 1] = o.last_stage_layers;
    rest -= o.last_stage_layers;
    --middle;
  }
  if (rest < 0 || (middle == 0 && rest != 0))
    throw Error(
        "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers do "
        "not add up to the layers" +
        sizes);
  if (middle > 0) {
    if (rest % middle != 0 || rest / middle == 0)
      throw Error("the " + std::to_string(rest) +
                  " layers left after --decoder-first/last-pipeline-num-layers do not divide "
                  "evenly over the other " +
                  std::to_string(middle) + " stage(s)" + sizes);
    const int first = o.first_stage_layers >= 0 ? 1 : 0;
    for (int s = first; s < first + middle; ++s) counts[s] = rest / middle;
  }
  for (int s = 0; s < P; ++s)
    if (counts[s] < 1)
      throw Error("pipeline stage " + std::to_string(s) + " would hold no layer" + sizes +
                  "; every stage needs at least one");
  return counts;
}

model::ModelPart part_of_rank(const PartitionOptions& o, const std::vector<int>& chunk_layers,
                              int rank) {
  std::vector<int> start(chunk_layers.size() + 1, 0);
  for (size_t j = 0; j < chunk_layers.size(); ++j) start[j + 1] = start[j] + chunk_layers[j];
  // The schedule's assignment of model chunks to ranks (the micro-batch count plays no part).
  const ScheduleShape shape{o.pp_size, 1, o.virtual_stages};
  model::ModelPart part;
  for (int c = 0; c < o.virtual_stages; ++c) {
    const int j = model_chunk(shape, rank, c);
    part.chunks.push_back({start[j], start[j + 1]});
  }
  part.embedding = rank == 0;
  part.head = rank == o.pp_size - 1;
  return part;
}

}  // namespace tessera::pipeline
