// Export to a Hugging Face model directory: `model.safetensors` (fp32, the family's tensor
// names and layouts), or shards plus `model.safetensors.index.json` when the weights exceed the
// shard size, and `config.json` (GPT2Config, LlamaConfig, Qwen2Config, MistralConfig or
// MixtralConfig fields, hf_model_type), loadable by Transformers' from_pretrained. hf_import.h
// reads such a directory back.
//
// Layout conversions: GPT-2's Conv1D weights (c_attn, c_proj, c_fc) are stored [in, out] by
// Transformers, so they are transposed; padded vocabulary rows are stripped; a tied output
// layer is not written (GPT-2 and LLaMA with tie_word_embeddings share wte). LLaMA's q/k
// rows need no permutation because Tessera's RoPE already uses the rotate-half convention.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/checkpoint/hf_weight_files.h"
#include "tessera/model/config.h"
#include "tessera/model/parameter.h"

namespace tessera::checkpoint {

// `master(p)` returns the fp32 value of parameter p (full, unsharded); it is called once per
// parameter in declaration order (tied copies skipped), and only one shard's values are held at
// a time. Writes config.json in the directory of `weights_path` (e.g. out/model.safetensors) and
// the weights, as Transformers' save_pretrained does:
//   - total tensor bytes <= max_shard_bytes: the single file `weights_path`;
//   - otherwise shards <stem>-00001-of-0000N.safetensors ... (stem "model" for model.safetensors;
//     tensors in declaration order, a new shard when the next tensor would overflow the current
//     one, so a tensor larger than max_shard_bytes sits alone) and <weights file
//     name>.index.json = {"metadata": {"total_size": bytes of tensor data}, "weight_map":
//     {tensor name: shard file name}}.
// Files of the other form (and shards of an earlier export with another N) are removed after
// the new ones are written, so the directory holds one unambiguous checkpoint. Throws
// tessera::Error when max_shard_bytes < 1 or the directory cannot be written.
void export_hf(const model::ModelConfig& cfg, const model::ParameterSet& params,
               const std::function<Tensor(const model::Parameter&)>& master,
               const std::string& weights_path, int64_t max_shard_bytes = 5'000'000'000);

// The F32 tensor of parameter p in a Hugging Face weight file: its name, hf_tensor_shape and
// fp32 values taken from master(p) when its file is written, padded vocabulary rows stripped
// and Conv1D weights transposed. cfg, p and master must outlive the write.
HfWeightEntry hf_f32_entry(const model::ModelConfig& cfg, const model::Parameter& p,
                           const std::function<Tensor(const model::Parameter&)>& master);

// True for the GPT-2 weights Transformers holds in Conv1D modules, stored [in, out] (c_attn,
// c_proj and c_fc weights); Tessera holds them (out, in).
bool is_hf_conv1d(const model::ModelConfig& cfg, const std::string& name);

// The shape parameter p has in a Hugging Face file: the global shape with the real vocabulary
// rows (padding stripped) and Conv1D weights transposed.
std::vector<int64_t> hf_tensor_shape(const model::ModelConfig& cfg, const model::Parameter& p);

// The transpose of a 2-D fp32 tensor (rows, cols) -> (cols, rows): GPT-2's Conv1D weights
// between Tessera's (out, in) and Transformers' [in, out], in both directions.
Tensor transposed(const Tensor& m);

// Throws tessera::Error naming the flag when cfg mixes the families in a way Transformers'
// GPT2LMHeadModel or LlamaForCausalLM cannot represent (e.g. RoPE with LayerNorm and GELU, or
// GQA in GPT-2), so an export is refused at startup instead of writing a model that loads wrong.
void check_hf_exportable(const model::ModelConfig& cfg);
// Why an MoE config is not a MixtralForCausalLM ("" when it is): such models are exported with
// model_type "tessera" (config.json holds Tessera's model config), which only Tessera reads.
std::string mixtral_mismatch(const model::ModelConfig& cfg);

// The model_type config.json gets: "gpt2" for the GPT-2 family; for LLaMA-named models
// "mixtral" (MoE, when mixtral_mismatch is ""), "qwen2" (q/k/v biases only, --add-qkv-bias
// with --disable-bias-linear), "mistral" (a sliding window, no biases) or "llama"; "tessera" for
// an MoE model no Transformers class represents. Llama 3.x's RoPE scaling is written as a
// rope_scaling block in any LLaMA-named family.
std::string hf_model_type(const model::ModelConfig& cfg);

// The config.json text for cfg.
std::string hf_config_json(const model::ModelConfig& cfg);

}  // namespace tessera::checkpoint
