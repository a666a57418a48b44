// The weight files of a Hugging Face model directory, in either form save_pretrained writes:
//   - one `model.safetensors`;
//   - shards `model-00001-of-0000N.safetensors` ... and `model.safetensors.index.json` =
//     {"metadata": {"total_size": bytes of tensor data}, "weight_map": {tensor name: shard}}
//     (the index's keys sorted, as save_pretrained writes them with sort_keys=True).
// HfWeightFiles reads either form and write_hf_weight_files writes one of them;
// both the unquantized export (hf_export.h, hf_import.h) and the quantized one
// (quantized_hf.h) go through them, so both can be sharded alike.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/core/tensor.h"

namespace tessera::checkpoint {

// The two forms' file names in a model directory.
inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";

// The tensors of a directory's weight files: model.safetensors if present (as Transformers
// prefers it), else the shards its index lists, every file opened (its header validated) by the
// constructor. Thread-compatible.
class HfWeightFiles {
 public:
  // Throws tessera::Error naming the directory when it holds neither form; naming the index when
  // it is not valid JSON, has no "weight_map" object, or maps a tensor to something that is not
  // a file name in the directory (a path could read outside it); and naming a weight file that
  // is missing, unreadable or malformed.
  explicit HfWeightFiles(const std::string& dir);

  // What errors about a missing tensor cite: model.safetensors or the index.
  const std::string& listing() const { return listing_; }
  // Stored tensor name -> path of the file holding it.
  const std::map<std::string, std::string>& file_of() const { return file_of_; }
  bool contains(const std::string& name) const { return file_of_.count(name) > 0; }
  // The file holding `name` (which must be listed). Throws tessera::Error naming the file and
  // the index when the shard the index names does not hold it.
  const SafetensorsFile& file(const std::string& name) const;
  // Every weight file of the directory, in path order.
  std::vector<const SafetensorsFile*> files() const;

 private:
  std::string listing_;
  std::map<std::string, std::string> file_of_;
  std::map<std::string, SafetensorsFile> opened_;  // path -> file
};

// One tensor to write. `data` is called when the tensor's file is written (so only one shard's
// tensors are materialised at a time) and returns its bytes (numel(shape) * element size,
// row-major); storage it creates for them goes into `hold`, which lives until the file is
// written.
struct HfWeightEntry {
  std::string name;
  SafeDType dtype;
  std::vector<int64_t> shape;
  std::function<const void*(std::vector<Tensor>& hold)> data;
};

// Writes `entries` to `weights_path` (e.g. out/model.safetensors) as save_pretrained does: the
// single file when their bytes total at most max_shard_bytes, else shards of the stem
// ("model-00001-of-0000N.safetensors", entries in the order given, a new shard when the next
// tensor would overflow the current one, so a tensor larger than max_shard_bytes sits alone)
// and <file name>.index.json. Every file gets `metadata` in its __metadata__. Files of the other
// form (and shards of an earlier write with another N) are removed after the new ones are
// written, so the directory holds one unambiguous set of weights. Throws tessera::Error when
// max_shard_bytes < 1, a file cannot be written, the directory cannot be listed or a stale file
// cannot be removed.
void write_hf_weight_files(const std::string& weights_path, std::span<const HfWeightEntry> entries,
                           int64_t max_shard_bytes,
                           const std::map<std::string, std::string>& metadata);

}  // namespace tessera::checkpoint
