// Distributed checkpoints (DESIGN.md "Checkpoints"): every rank writes the slices it owns to
// one safetensors file, rank 0 then publishes the checkpoint; any layout loads any other by
// reading only the slices it needs.
//
// Directory layout, Megatron's naming:
//   <save>/latest_checkpointed_iteration.txt   the iteration of the newest complete checkpoint
//   <save>/iter_0000100/metadata.json          every tensor's canonical shape and the slices
//                                              each file holds (with XXH3 checksums), the file
//                                              sizes, and the run state (iteration, consumed
//                                              samples, optimizer steps, loss scaler, seed,
//                                              arguments), and every file's size
//   <save>/iter_0000100/rank_00003.safetensors fp32 slices of world rank 3
// A save writes into iter_0000100.tmp/; once every rank's file is complete, rank 0 writes
// metadata.json, renames the directory and only then rewrites the pointer (each step an fsync'd
// rename). A save interrupted at any point leaves the previous checkpoint and the pointer as
// they were; the next save removes the stale .tmp directory.
//
// Tensor names are canonical parameter names (the fp32 master weights) and
// "optimizer.<state>.<parameter>" for optimizer state; each saved slice is a TensorSlice
// (tensor_slice.h), so the saving layout never matters to the loader.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/checkpoint/tensor_slice.h"
#include "tessera/io/direct_file_writer.h"

namespace tessera::checkpoint {

// <save>/iter_0000100 and its staging directory <save>/iter_0000100.tmp.
std::string iteration_dir(const std::string& save, int64_t iteration);
std::string staging_dir(const std::string& save, int64_t iteration);
// <save>/latest_checkpointed_iteration.txt.
std::string latest_file(const std::string& save);

// The checkpoint directory `load` names: `load` itself when it holds metadata.json, else the
// iteration the pointer file names. nullopt when `load` holds no checkpoint at all (no pointer:
// a fresh run, as Megatron starts from scratch). Throws tessera::Error naming the file when the
// pointer is malformed or names a directory without metadata.json, and when `load` is a
// Megatron-LM checkpoint (megatron_format.h: the error names the format and the way through
// Hugging Face).
std::optional<std::string> find_checkpoint(const std::string& load);

// One rank's part of a checkpoint, copied out of the training state (the snapshot: training may
// change the originals as soon as add() returns), for a save that writes in the background
// while training goes on. A save that cannot hold a copy (optimizer state on NVMe) streams its
// file with a RankFileWriter (rank_file_writer.h), which write() uses too: same bytes.
class RankSnapshot {
 public:
  // Copies `slice.numel()` floats from `data`.
  void add(const std::string& name, const TensorSlice& slice, const float* data);
  // Bytes of the copies.
  int64_t bytes() const { return bytes_; }

  // Writes <dir>/rank_<rank>.safetensors (fsync'd) through a RankFileWriter with the engine
  // settings `io`. Throws tessera::Error on I/O errors.
  void write(const std::string& dir, int rank, const io::DirectFileWriter::Options& io = {}) const;

 private:
  struct Entry {
    std::string name;
    TensorSlice slice;
    std::vector<float> data;
  };
  std::vector<Entry> entries_;
  int64_t bytes_ = 0;
};

// Rank 0's side of a save (call after every rank's write() returned): reads the rank files'
// headers, writes metadata.json with `state` as the run state, renames the staging directory
// to iteration_dir (swapped atomically with an existing one of the same iteration), updates the
// pointer, then keeps only the `keep` iteration directories of highest iteration (0: all; the
// one published is always kept). Every file in the staging directory is listed with its size. Throws tessera::Error on I/O
// errors or a missing rank file.
void publish_checkpoint(const std::string& save, int64_t iteration, int world_size,
                        const nlohmann::json& state, int keep);

// Prepares the staging directory of a save (rank 0, before any rank writes): removes the staging
// directories interrupted saves left, creates this one. tessera::Error when it cannot.
void prepare_staging(const std::string& save, int64_t iteration);

// A published checkpoint, read slice by slice. Reads metadata.json and checks that every file
// it lists exists with its recorded size; tensor data is memory-mapped and paged in only for
// the slices read. Errors are tessera::Error with one line naming the file and the tensor.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir);
  ~CheckpointReader();

  const std::string& dir() const { return dir_; }
  int64_t iteration() const { return iteration_; }
  // The run state given to publish_checkpoint().
  const nlohmann::json& state() const { return state_; }
  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  // Canonical names, sorted.
  std::vector<std::string> names() const;
  // Canonical global shape; tessera::Error for an unknown name.
  const std::vector<int64_t>& shape(const std::string& name) const;

  // Fills the target slice's packed data (target.numel() floats; elements of padded rows are
  // left as they are). Every source slice touched is checksummed (once). tessera::Error when
  // the canonical shapes differ, the checkpoint lacks elements of the slice, or a checksum or
  // file does not match.
  void read(const std::string& name, const TensorSlice& target, float* out);

 private:
  struct Source {
    std::string file, key, checksum;
    TensorSlice slice;
    std::vector<Run> runs;  // runs(slice), computed on first use (most sources are never read)
    bool verified = false;  // the checksum matched
  };
  struct Entry {
    std::vector<int64_t> shape;
    std::vector<Source> sources;
  };
  const SafetensorsFile& file(const std::string& name);

  std::string dir_;
  int64_t iteration_ = 0;
  nlohmann::json state_;
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

}  // namespace tessera::checkpoint
