#include "tessera/checkpoint/convert.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "tessera/checkpoint/hf_export.h"
#include "tessera/checkpoint/hf_import.h"
#include "tessera/checkpoint/megatron_format.h"
#include "tessera/checkpoint/run_state.h"
#include "tessera/checkpoint/sharded_checkpoint.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/model/gpt_model.h"

namespace tessera::checkpoint {
namespace fs = std::filesystem;
namespace {

void copy_tokenizer_files(const fs::path& from, const fs::path& to) {
  for (const char* name : kTokenizerFiles)
    if (fs::exists(from / name)) copy_file_atomically((from / name).string(), (to / name).string());
}

// The model configuration and reader of the checkpoint `checkpoint` names.
struct OpenedCheckpoint {
  std::string dir;
  std::unique_ptr<CheckpointReader> reader;
  model::ModelConfig cfg;
};

OpenedCheckpoint open_checkpoint(const std::string& checkpoint) {
  const std::optional<std::string> dir = find_checkpoint(checkpoint);
  if (!dir) throw Error(checkpoint + ": no checkpoint there (no metadata.json, no pointer file)");
  auto reader = std::make_unique<CheckpointReader>(*dir);
  const nlohmann::json& state = reader->state();
  if (!state.contains("model"))
    throw Error(*dir + "/metadata.json: the run state has no model configuration");
  model::ModelConfig cfg = model_config_from_json(state["model"], *dir + "/metadata.json: model");
  return {*dir, std::move(reader), cfg};
}

}  // namespace

void convert_to_quantized_hf(const std::string& from, const std::string& source,
                             const std::string& out_dir, const QuantSpec& spec,
                             int64_t max_shard_bytes) {
  std::error_code ec;
  if (fs::equivalent(source, out_dir, ec))  // the writer would replace the weights it reads
    throw Error("--to hf " + out_dir + ": the source directory itself; give another directory");
  if (from == "hf") {
    if (!is_hf_directory(source)) refuse_megatron_checkpoint(source);
    const model::ModelConfig cfg = read_hf_config(source);
    const std::map<std::string, Tensor> weights = read_hf_weights(source, cfg);
    write_quantized_hf(
        cfg,
        [&](const model::Parameter& p) {
          // read_hf_weights gives the real vocabulary rows; the padded rows are zeros.
          Tensor t = Tensor::zeros(p.global_shape, DType::kF32, MemoryCategory::kOther);
          const Tensor& w = weights.at(p.name);
          std::memcpy(t.raw(), w.raw(), static_cast<size_t>(w.numel()) * sizeof(float));
          return t;
        },
        spec, out_dir, max_shard_bytes);
    copy_tokenizer_files(source, out_dir);
    return;
  }
  const OpenedCheckpoint c = open_checkpoint(source);
  write_quantized_hf(
      c.cfg,
      [&](const model::Parameter& p) {
        Tensor t = Tensor::zeros(p.global_shape, DType::kF32, MemoryCategory::kOther);
        c.reader->read(p.name, TensorSlice::of(p, 0, p.numel()), t.data<float>());
        return t;
      },
      spec, out_dir, max_shard_bytes);
  copy_tokenizer_files(c.dir, out_dir);
  copy_tokenizer_files(source, out_dir);
}

void convert_checkpoint_to_hf(const std::string& checkpoint, const std::string& out_dir,
                              int64_t max_shard_bytes) {
  const OpenedCheckpoint c = open_checkpoint(checkpoint);
  check_hf_exportable(c.cfg);
  // The model as one process declares it; the exporter strips the padded rows again.
  const model::ParameterSet params = model::GPTModel::declare_part(c.cfg, 1, 0, {});
  fs::create_directories(out_dir);
  export_hf(
      c.cfg, params,
      [&](const model::Parameter& p) {
        Tensor t = Tensor::zeros(p.global_shape, DType::kF32, MemoryCategory::kOther);
        c.reader->read(p.name, TensorSlice::of(p, 0, p.numel()), t.data<float>());
        return t;
      },
      (fs::path(out_dir) / "model.safetensors").string(), max_shard_bytes);
  copy_tokenizer_files(c.dir, out_dir);
  copy_tokenizer_files(checkpoint, out_dir);
}

void convert_hf_to_checkpoint(const std::string& hf_dir, const std::string& out) {
  if (!is_hf_directory(hf_dir)) refuse_megatron_checkpoint(hf_dir);
  const model::ModelConfig cfg = read_hf_config(hf_dir);
  const std::map<std::string, Tensor> weights = read_hf_weights(hf_dir, cfg);
  RankSnapshot snapshot;
  for (const auto& [name, w] : weights)
    snapshot.add(name, TensorSlice::whole(w.shape()), w.data<float>());
  fs::create_directories(out);
  prepare_staging(out, 0);
  snapshot.write(staging_dir(out, 0), 0);
  const nlohmann::json state = {{"iteration", 0},
                                {"release", true},
                                {"consumed_samples", 0},
                                {"optimizer", {{"kind", "adam"}, {"steps", 0}, {"saved", false}}},
                                {"model", model_config_to_json(cfg)},
                                {"layout",
                                 {{"world_size", 1},
                                  {"tensor_model_parallel_size", 1},
                                  {"pipeline_model_parallel_size", 1},
                                  {"virtual_pipeline_stages", 1},
                                  {"data_parallel_size", 1},
                                  {"zero_stage", 0}}},
                                {"source", fs::absolute(hf_dir).string()}};
  publish_checkpoint(out, 0, 1, state, 0);
  copy_tokenizer_files(hf_dir, out);
}

}  // namespace tessera::checkpoint
