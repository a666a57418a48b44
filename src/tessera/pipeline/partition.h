// Which transformer layers each pipeline rank holds (Megatron's layer assignment).
//
// The L layers are cut into V*P model chunks of consecutive layers; rank r holds model chunks
// r, P + r, 2P + r, ... (its local chunks 0 .. V-1, see schedule.h). Uniform by default: every
// model chunk gets L / (V*P) layers. With --decoder-first-pipeline-num-layers and/or
// --decoder-last-pipeline-num-layers (V = 1 only) the first and/or last stage get the given
// counts and the other stages share the rest evenly. Model chunk 0 also holds the embeddings,
// the last model chunk the final norm, output layer and loss.
#pragma once

#include <vector>

#include "tessera/model/gpt_model.h"

namespace tessera::pipeline {

struct PartitionOptions {
  int num_layers = 1;
  int pp_size = 1;              // P
  int virtual_stages = 1;       // V
  int first_stage_layers = -1;  // --decoder-first-pipeline-num-layers (-1: not given)
  int last_stage_layers = -1;   // --decoder-last-pipeline-num-layers (-1: not given)
};

// V for --num-layers-per-virtual-pipeline-stage `layers_per_virtual_stage` (0: not given, V = 1):
// num_layers / (pp_size x layers_per_virtual_stage). tessera::Error naming the three flags when
// that product does not divide num_layers.
int virtual_stages_for(int num_layers, int pp_size, int layers_per_virtual_stage);

// The layer count of every model chunk (V*P of them, in model order). tessera::Error naming the
// flags when the layers cannot be split as asked (P or V*P not dividing them, P larger than the
// layer count, uneven counts that do not add up or leave a stage without layers).
std::vector<int> partition_layers(const PartitionOptions& o);

// The part of the model rank `rank` builds, from partition_layers()'s counts.
model::ModelPart part_of_rank(const PartitionOptions& o, const std::vector<int>& chunk_layers,
                              int rank);

}  // namespace tessera::pipeline
