// Import from a Hugging Face model directory: the inverse of hf_export.h.
//
// config.json (GPT2Config, model_type "gpt2"; LlamaConfig, model_type "llama") becomes a
// ModelConfig whose family() and parameter names are those the checkpoint uses, and the weights
// (model.safetensors, or the shards model.safetensors.index.json lists) become fp32 tensors in
// Tessera's layout keyed by the canonical parameter names. Nothing is guessed: a setting Tessera
// cannot compute the same way, a missing or misshapen tensor, or a tensor the model does not
// have is a tessera::Error naming the file and the key or tensor. Layouts and limits are
// described in docs/huggingface.md.
#pragma once

#include <map>
#include <set>
#include <string>

#include "tessera/core/tensor.h"
#include "tessera/model/config.h"

namespace tessera::checkpoint {

// True when `dir` holds a Hugging Face model: config.json plus model.safetensors or
// model.safetensors.index.json. Never throws (an unreadable directory is false).
bool is_hf_directory(const std::string& dir);

// dir/config.json as a ModelConfig: the inverse of hf_config_json() for every field it writes.
// Keys it does not write take Transformers' defaults for the config class (GPT2Config: n_inner
// null = 4*n_embd, tie_word_embeddings true; LlamaConfig: num_key_value_heads = heads,
// rms_norm_eps 1e-6, rope_theta 10000, tie_word_embeddings false, attention_bias and mlp_bias
// false). Fields HF configs do not hold keep ModelConfig's defaults, except seq_length, which is
// set to the model's maximum positions (callers override it with --seq-length). GPT-2's
// embd_pdrop is not read (Tessera has one --hidden-dropout, taken from resid_pdrop); LLaMA has
// no hidden dropout, so it is 0. Throws tessera::Error with one line naming the file and the key
// for an unreadable file, invalid JSON, a value of the wrong type, an unknown model_type or a
// setting Tessera cannot compute (another activation, rope_scaling, a head_dim other than
// hidden/heads, attention_bias != mlp_bias, ...), and for sizes ModelConfig::validate() refuses.
model::ModelConfig read_hf_config(const std::string& dir);

// The weights of dir (model.safetensors if present, as Transformers prefers it, else the shards
// listed by model.safetensors.index.json), keyed by GPTModel's canonical parameter names for
// cfg, each a new fp32 tensor in Tessera's layout with the *unpadded* global shape (vocabulary
// rows = cfg.vocab_size). GPT-2's Conv1D weights (stored [in, out]) are transposed back to
// (out, in); F32, BF16 and F16 tensors are accepted and widened exactly. A stored name may omit
// the base model's prefix ("transformer." for GPT-2, "model." for LLaMA), as the base models
// (GPT2Model, LlamaModel) save them. Ignored: the buffers attn.bias, attn.masked_bias and
// rotary_emb.inv_freq, and lm_head.weight when the embeddings are tied. Throws tessera::Error
// naming the file and the tensor when a parameter is missing or has the wrong shape or dtype,
// when a stored tensor is neither a parameter nor an ignored buffer (the config and the weights
// disagree), and when a file is missing, unreadable or malformed (truncated, bad index, a shard
// without a tensor the index places in it).
// A quantized directory (config.json's "quantization", checkpoint/quantized_hf.h) is refused
// unless `quantized` lists its quantized tensors: those (and their .scale and .min) are then
// skipped and absent from the result, for inference to install as codes. Training and
// conversion to a Tessera checkpoint pass none: quantized weights are for inference only.
std::map<std::string, Tensor> read_hf_weights(const std::string& dir, const model::ModelConfig& cfg,
                                              const std::set<std::string>* quantized = nullptr);

}  // namespace tessera::checkpoint
