#include "tessera/checkpoint/hf_weight_files.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"

namespace tessera::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// "<stem>-00003-of-00007.safetensors", save_pretrained's shard names (1-based).
std::string shard_name(const std::string& stem, size_t index, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "-%05zu-of-%05zu.safetensors", index + 1, count);
  return stem + buf;
}

// True for a file name of the form <stem>-<digits>-of-<digits>.safetensors.
bool is_shard_name(const std::string& file, const std::string& stem) {
  const std::string head = stem + "-", tail = ".safetensors";
  if (file.size() <= head.size() + tail.size() || file.compare(0, head.size(), head) != 0 ||
      !file.ends_with(tail))
    return false;
  const std::string middle = file.substr(head.size(), file.size() - head.size() - tail.size());
  const size_t of = middle.find("-of-");
  const auto digits = [](const std::string& d) {
    return !d.empty() && d.find_first_not_of("0123456789") == std::string::npos;
  };
  return of != std::string::npos && digits(middle.substr(0, of)) && digits(middle.substr(of + 4));
}

// Writes one safetensors file holding `entries`; their data is held only meanwhile.
void write_file(const std::string& path, std::span<const HfWeightEntry> entries,
                const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> hold;
  std::vector<SafeTensorView> views;
  views.reserve(entries.size());
  for (const HfWeightEntry& e : entries) views.push_back({e.name, e.dtype, e.shape, e.data(hold)});
  write_safetensors(path, views, metadata);
}

// Removes the weight files of an earlier write in `dir` that this one did not write: the single
// weights file, the index and shards of any count.
void remove_stale(const fs::path& dir, const std::string& weights_file,
                  const std::string& index_file, const std::string& stem,
                  const std::set<std::string>& written) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (written.count(name)) continue;
    if (name == weights_file || name == index_file || is_shard_name(name, stem))
      stale.push_back(entry.path());
  }
  if (ec) throw Error(dir.string() + ": cannot list the export directory: " + ec.message());
  for (const fs::path& path : stale) {
    if (!fs::remove(path, ec) || ec)
      throw Error(path.string() +
                  ": cannot remove this stale file of an earlier export: " + ec.message());
  }
}

}  // namespace

HfWeightFiles::HfWeightFiles(const std::string& dir) {
  const fs::path d(dir);
  if (fs::exists(d / kHfWeightsFile)) {
    listing_ = (d / kHfWeightsFile).string();
    const SafetensorsFile& f = opened_.emplace(listing_, SafetensorsFile(listing_)).first->second;
    for (const std::string& name : f.names()) file_of_[name] = listing_;
    return;
  }
  listing_ = (d / kHfIndexFile).string();
  if (!fs::exists(listing_))
    throw Error(dir + ": no " + kHfWeightsFile + " or " + kHfIndexFile +
                ": expected a Hugging Face model directory");
  json index;
  try {
    index = json::parse(read_file(listing_, "Hugging Face weight index"));
  } catch (const json::exception& e) {
    throw Error(listing_ + ": not valid JSON: " + one_line(e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(listing_ + ": expected an object with a \"weight_map\" object");
  for (const auto& [name, file] : index["weight_map"].items()) {
    const std::string where = listing_ + ": weight_map entry '" + name + "'";
    if (!file.is_string()) throw Error(where + ": expected a file name, got " + file.dump());
    const std::string f = file.get<std::string>();
    // Shards sit next to the index; anything else could read outside the model directory.
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      throw Error(where + ": '" + f + "' is not a file name in the model directory");
    file_of_[name] = (d / f).string();
  }
  for (const auto& [name, path] : file_of_)
    if (!opened_.count(path)) opened_.emplace(path, SafetensorsFile(path));
}

const SafetensorsFile& HfWeightFiles::file(const std::string& name) const {
  const std::string& path = file_of_.at(name);
  const SafetensorsFile& f = opened_.at(path);
  if (!f.contains(name))
    throw Error(path + ": has no tensor '" + name + "', which " + listing_ + " places in it");
  return f;
}

std::vector<const SafetensorsFile*> HfWeightFiles::files() const {
  std::vector<const SafetensorsFile*> out;
  for (const auto& [path, f] : opened_) out.push_back(&f);
  return out;
}

void write_hf_weight_files(const std::string& weights_path, std::span<const HfWeightEntry> entries,
                           int64_t max_shard_bytes,
                           const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes < 1)
    throw Error(weights_path + ": the shard size must be >= 1 byte, got " +
                std::to_string(max_shard_bytes));
  std::vector<int64_t> bytes;
  int64_t total = 0;
  for (const HfWeightEntry& e : entries) {
    bytes.push_back(shape_numel(e.shape) * static_cast<int64_t>(safe_dtype_size(e.dtype)));
    total += bytes.back();
  }
  // Shards as [begin, end) ranges of entries: a new one when the next tensor would overflow.
  std::vector<std::pair<size_t, size_t>> shards;
  int64_t filled = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (shards.empty() || (filled > 0 && filled + bytes[i] > max_shard_bytes)) {
      shards.push_back({i, i});
      filled = 0;
    }
    shards.back().second = i + 1;
    filled += bytes[i];
  }

  const fs::path path(weights_path);
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const std::string file = path.filename().string(), stem = path.stem().string();
  const std::string index_file = file + ".index.json";
  std::set<std::string> written;
  if (shards.size() <= 1) {
    write_file(weights_path, entries, metadata);
    written.insert(file);
  } else {
    json weight_map = json::object();
    for (size_t s = 0; s < shards.size(); ++s) {
      const std::string name = shard_name(stem, s, shards.size());
      const auto [begin, end] = shards[s];
      write_file((dir / name).string(), entries.subspan(begin, end - begin), metadata);
      for (size_t i = begin; i < end; ++i) weight_map[entries[i].name] = name;
      written.insert(name);
    }
    json index;  // keys sorted, as save_pretrained writes them (sort_keys=True)
    index["metadata"]["total_size"] = total;
    index["weight_map"] = std::move(weight_map);
    write_file_atomically((dir / index_file).string(), index.dump(2) + "\n");
    written.insert(index_file);
  }
  remove_stale(dir, file, index_file, stem, written);
}

}  // namespace tessera::checkpoint
