// Quantized Hugging Face-style directories (docs/quantization.md): config.json and the weights
// (hf_weight_files.h: one model.safetensors, or shards and an index) in which the linear weights
// GPTModel::quantize_weights quantizes (attention q/k/v/o, MLP gate/up/down or c_fc/c_proj, an
// MoE block's experts and shared expert but not its router, optionally the output layer) are
// stored as their codes and fp16 scales, and every other tensor as an ordinary export has it
// (F32).
//
// A quantized weight keeps its parameter's canonical name (model/parameter.h):
//   <name>        U8  [rows, quant_row_bytes(format, cols)]  the codes row by row, the format's
//                 packing (quant/quantized_matrix.h); rows are output features (nn.Linear's
//                 layout, also for GPT-2's Conv1D weights, which F32 exports store transposed)
//                 and the vocabulary's real rows for lm_head.weight
//   <name>.scale  F16 [rows, cols / group]                     fp16 scales (group = cols for
//                 fp6 and int8)
//   <name>.min    F16 [rows, cols / group]                     q4's minimums (q4 only)
// Each separately named tensor (q_proj, k_proj, v_proj, ...) is quantized on its own: scales
// only look along a row, so this equals quantizing the fused matrix the model runs. A quantized
// output layer is lm_head.weight even when the embeddings are tied (the embedding stays F32).
// Every weight file's __metadata__ holds "quantization": format and "quantization_group_size";
// config.json holds "quantization": {"format", "group_size" (-1: one scale per row),
// "output_layer"}.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "tessera/checkpoint/hf_weight_files.h"
#include "tessera/checkpoint/safetensors.h"
#include "tessera/model/gpt_model.h"
#include "tessera/quant/quantized_matrix.h"

namespace tessera::checkpoint {

// What a quantized directory holds: the format, q4's group (32 or 64; ignored otherwise) and
// whether the output layer is quantized.
struct QuantSpec {
  quant::QuantFormat format = quant::QuantFormat::kInt8;
  int64_t q4_group = 32;
  bool output_layer = false;
  // The group_size written: weights per scale along a row, -1 for one scale a row (AutoGPTQ's
  // spelling of per-channel).
  int64_t group_size() const;
};

// config.json's "quantization" block of `dir`, or nullopt when it has none (an unquantized
// directory). Throws tessera::Error naming the file and key for a malformed block (an unknown
// format, a group size the format does not have, a missing or mistyped key).
std::optional<QuantSpec> read_quant_spec(const std::string& dir);

// Writes a quantized directory: config.json (hf_config_json plus the block) and the weights,
// out_dir/model.safetensors or, beyond max_shard_bytes, its shards and index (as export_hf), from
// `master(p)` (p's full fp32 value, Tessera's layout, padded
// vocabulary rows included, as export_hf asks). Builds the model once in fp32 to learn which
// weights quantize_weights quantizes. Throws tessera::Error naming the tensor when its shape
// does not suit the format ("...down_proj.weight: q8_0 ... 176 columns is not a multiple of 32"),
// and as export_hf for a model Transformers cannot represent or an unwritable directory.
void write_quantized_hf(const model::ModelConfig& cfg,
                        const std::function<Tensor(const model::Parameter&)>& master,
                        const QuantSpec& spec, const std::string& out_dir,
                        int64_t max_shard_bytes = 5'000'000'000);

// The quantized tensors of a directory's weights (one file or shards), checked against
// config.json's model and block when opened: every tensor with a .scale, or of dtype U8, must be
// a 2-D U8 tensor of the parameter's rows and the format's bytes a row, with F16 scales (and
// q4's minimums) of [rows, cols / group], and every weight file's metadata must name the same
// format and group. Each violation is a tessera::Error of one line naming the file and tensor.
// Thread-compatible.
class QuantizedWeights {
 public:
  QuantizedWeights(const std::string& dir, const model::ModelConfig& cfg, const QuantSpec& spec);

  // The stored names of the quantized weights.
  const std::set<std::string>& names() const { return names_; }
  // The whole stored matrix of `name` (real vocabulary rows for lm_head.weight).
  quant::QuantizedMatrix whole(const std::string& name) const;
  // The part of `name` this rank holds under `p`'s tensor-parallel split (p is the parameter
  // itself, or the word embedding for a tied lm_head.weight): row ranges for a column-parallel
  // weight (padded vocabulary rows are quantized zeros, as quantizing the padded weight gives);
  // column ranges for a row-parallel one, which must fall on the format's packing and groups
  // (fp6: multiples of 4 columns; q8_0 and q4: of the group); fp6 and int8 keep the whole
  // row's scale. tessera::Error of one line for a split the format cannot represent.
  quant::QuantizedMatrix shard(const std::string& name, const model::Parameter& p) const;
  // The quantizer (model/linear.h) that installs these codes: each bound name's shard, fused
  // rows concatenated in order. Records which names were asked for.
  model::WeightQuantizer quantizer(const model::ParameterSet& params) const;
  // Throws tessera::Error naming a stored quantized tensor no layer asked for (a weight Tessera
  // does not quantize: embeddings, norms, an MoE router), after GPTModel::quantize_weights.
  void check_all_used() const;

 private:
  // The file holding `name` (which must be stored).
  const SafetensorsFile& file(const std::string& name) const { return files_.file(name); }

  QuantSpec spec_;
  HfWeightFiles files_;
  std::set<std::string> names_;
  // (rows, cols) per weight name, from config.json's model (real vocabulary rows).
  std::map<std::string, std::pair<int64_t, int64_t>> shapes_;
  mutable std::set<std::string> used_;
};

}  // namespace tessera::checkpoint
