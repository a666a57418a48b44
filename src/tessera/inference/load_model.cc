#include "tessera/inference/load_model.h"

#include <filesystem>
#include <map>
#include <optional>
#include <vector>

#include "tessera/checkpoint/hf_import.h"
#include "tessera/checkpoint/quantized_hf.h"
#include "tessera/checkpoint/run_state.h"
#include "tessera/checkpoint/sharded_checkpoint.h"
#include "tessera/checkpoint/tensor_slice.h"
#include "tessera/core/error.h"

namespace tessera::inference {
namespace fs = std::filesystem;

namespace {

// Every parameter's values from `read` (its fp32 master elements, this process's whole tensor),
// rounded into the model's compute dtype; padded vocabulary rows stay zero. The model was built
// without initial values (all zero); a parameter `stored` says is not there in full precision
// (stored quantized) is left untouched, so its pages never become resident.
template <typename Stored, typename Read>
void fill(model::GPTModel& m, Stored stored, Read read) {
  for (model::Parameter& p : m.params().all()) {
    if (p.tied_copy || !stored(p)) continue;  // a tied copy: the original carries the values
    Tensor fp32 = Tensor::zeros({p.numel()}, DType::kF32, MemoryCategory::kOther);
    read(p, fp32.data<float>());
    p.value.view({p.numel()}).copy_from(fp32);
  }
}

std::string beside(const fs::path& dir, const char* name) {
  return fs::exists(dir / name) ? (dir / name).string() : "";
}

}  // namespace

LoadedModel load_model(const std::string& path, DType dtype, const parallel::TensorParallel& tp) {
  LoadedModel out;
  if (checkpoint::is_hf_directory(path)) {
    const model::ModelConfig cfg = checkpoint::read_hf_config(path);
    const std::optional<checkpoint::QuantSpec> spec = checkpoint::read_quant_spec(path);
    std::optional<checkpoint::QuantizedWeights> quantized;
    if (spec) quantized.emplace(path, cfg, *spec);
    const std::map<std::string, Tensor> weights =
        checkpoint::read_hf_weights(path, cfg, quantized ? &quantized->names() : nullptr);
    out.model = std::make_unique<model::GPTModel>(cfg, dtype, std::nullopt, tp);
    // Weights stored quantized are not in `weights`: their codes are installed below.
    const auto stored = [&](const model::Parameter& p) { return weights.count(p.name) > 0; };
    fill(*out.model, stored, [&](const model::Parameter& p, float* dst) {
      const Tensor& w = weights.at(p.name);
      const checkpoint::TensorSlice slice = checkpoint::TensorSlice::of(p, 0, p.numel());
      checkpoint::copy_overlap(checkpoint::runs(checkpoint::TensorSlice::whole(w.shape())), w.raw(),
                               checkpoint::runs(slice), dst, sizeof(float));
    });
    if (quantized) {
      // The stored codes as they are: no re-quantization, so --quantize FORMAT on the
      // unquantized weights gives the same matrices in one process (docs/quantization.md).
      out.model->quantize_weights(quantized->quantizer(out.model->params()), spec->output_layer);
      quantized->check_all_used();
      out.quantized = quant::quant_format_name(spec->format);
    }
    out.source = "Hugging Face directory " + path;
    if (quantized) out.source += ", quantized " + out.quantized;
    out.tokenizer_json = beside(path, "tokenizer.json");
    out.tokenizer_config_json = beside(path, "tokenizer_config.json");
    return out;
  }
  const std::optional<std::string> dir = checkpoint::find_checkpoint(path);
  if (!dir)
    throw Error(
        "--load " + path +
        ": neither a Tessera checkpoint (metadata.json or a latest_checkpointed_iteration.txt "
        "pointer) nor a Hugging Face model directory (config.json and safetensors)");
  checkpoint::CheckpointReader reader(*dir);
  if (!reader.state().contains("model"))
    throw Error(*dir + "/metadata.json: the run state has no model configuration");
  const model::ModelConfig cfg =
      checkpoint::model_config_from_json(reader.state()["model"], *dir + "/metadata.json: model");
  out.model = std::make_unique<model::GPTModel>(cfg, dtype, std::nullopt, tp);
  fill(
      *out.model, [](const model::Parameter&) { return true; },
      [&](const model::Parameter& p, float* dst) {
        reader.read(p.name, checkpoint::TensorSlice::of(p, 0, p.numel()), dst);
      });
  out.source = "Tessera checkpoint " + *dir;
  out.tokenizer_json = beside(*dir, "tokenizer.json");
  if (out.tokenizer_json.empty()) out.tokenizer_json = beside(path, "tokenizer.json");
  out.tokenizer_config_json = beside(*dir, "tokenizer_config.json");
  if (out.tokenizer_config_json.empty())
    out.tokenizer_config_json = beside(path, "tokenizer_config.json");
  return out;
}

}  // namespace tessera::inference
