// Export to a Hugging Face model directory: `model.safetensors` (fp32, the family's tensor
// names and layouts) and `config.json` (GPT2Config or LlamaConfig fields), loadable by
// Transformers' from_pretrained.
//
// Layout conversions: GPT-2's Conv1D weights (c_attn, c_proj, c_fc) are stored [in, out] by
// Transformers, so they are transposed; padded vocabulary rows are stripped; a tied output
// layer is not written (GPT-2 and LLaMA with tie_word_embeddings share wte). LLaMA's q/k
// rows need no permutation because Tessera's RoPE already uses the rotate-half convention.
#pragma once

#include <functional>
#include <string>

#include "tessera/model/config.h"
#include "tessera/model/parameter.h"

namespace tessera::checkpoint {

// `master(p)` returns the fp32 value of parameter p (full, unsharded). Writes `weights_path`
// (e.g. out/model.safetensors) and config.json in the same directory. Throws tessera::Error
// when the directory cannot be written.
void export_hf(const model::ModelConfig& cfg, const model::ParameterSet& params,
               const std::function<Tensor(const model::Parameter&)>& master,
               const std::string& weights_path);

// Throws tessera::Error naming the flag when cfg mixes the families in a way Transformers'
// GPT2LMHeadModel or LlamaForCausalLM cannot represent (e.g. RoPE with LayerNorm and GELU, or
// GQA in GPT-2), so an export is refused at startup instead of writing a model that loads wrong.
void check_hf_exportable(const model::ModelConfig& cfg);

// The config.json text for cfg.
std::string hf_config_json(const model::ModelConfig& cfg);

}  // namespace tessera::checkpoint
