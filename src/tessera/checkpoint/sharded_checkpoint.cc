#include "tessera/checkpoint/sharded_checkpoint.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "tessera/checkpoint/megatron_format.h"
#include "tessera/checkpoint/rank_file_writer.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"

namespace tessera::checkpoint {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "tessera-checkpoint";
constexpr int kVersion = 1;

std::string checksum(const void* data, size_t bytes) {
  return checksum_text(XXH3_64bits(data, bytes));
}

// Makes a rename inside `dir` durable.
void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw Error(dir.string() + ": cannot open the directory to sync it");
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) throw Error(dir.string() + ": fsync of the directory failed");
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) throw Error("cannot rename " + from.string() + " to " + to.string() + ": " + ec.message());
}

std::optional<int64_t> parse_iteration_dir(const std::string& name) {
  // iter_%07d: 7 digits, more from iteration 10^7 on.
  if (name.size() < 12 || name.size() > 23 || name.rfind("iter_", 0) != 0) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

// Removes all but the newest `keep` iteration directories of `save` (never `latest`).
void prune(const std::string& save, int keep, int64_t latest) {
  std::vector<std::pair<int64_t, fs::path>> dirs;
  for (const auto& e : fs::directory_iterator(save))
    if (const auto it = parse_iteration_dir(e.path().filename().string()); it && e.is_directory())
      dirs.push_back({*it, e.path()});
  std::sort(dirs.rbegin(), dirs.rend());
  for (size_t i = static_cast<size_t>(keep); i < dirs.size(); ++i)
    if (dirs[i].first != latest) fs::remove_all(dirs[i].second);
}

}  // namespace

std::string iteration_dir(const std::string& save, int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return (fs::path(save) / buf).string();
}

std::string staging_dir(const std::string& save, int64_t iteration) {
  return iteration_dir(save, iteration) + ".tmp";
}

std::string latest_file(const std::string& save) {
  return (fs::path(save) / "latest_checkpointed_iteration.txt").string();
}

std::optional<std::string> find_checkpoint(const std::string& load) {
  refuse_megatron_checkpoint(load);  // Megatron's tracker file has the same name
  if (fs::exists(fs::path(load) / "metadata.json")) return load;
  const std::string pointer = latest_file(load);
  if (!fs::exists(pointer)) return std::nullopt;
  std::string text = read_file(pointer, "checkpoint pointer");
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  int64_t iteration = -1;
  if (!text.empty() && text.size() < 18 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    iteration = std::stoll(text);
  if (iteration < 0)
    throw Error(pointer + ": expected an iteration number, got '" + text.substr(0, 40) + "'");
  const std::string dir = iteration_dir(load, iteration);
  if (!fs::exists(fs::path(dir) / "metadata.json"))
    throw Error(pointer + " names iteration " + text + " but " + dir +
                "/metadata.json does not exist: the checkpoint is missing or incomplete");
  return dir;
}

// ---------------------------------------------------------------------------------------------
// Save

void RankSnapshot::add(const std::string& name, const TensorSlice& slice, const float* data) {
  entries_.push_back({name, slice, std::vector<float>(data, data + slice.numel())});
  bytes_ += slice.numel() * static_cast<int64_t>(sizeof(float));
}

void RankSnapshot::write(const std::string& dir, int rank,
                         const io::DirectFileWriter::Options& io) const {
  RankFileWriter writer(RankFileWriter::WriteMode::kDirectWhereSupported, io);
  for (const Entry& e : entries_) writer.declare(e.name, e.slice);
  writer.open(dir, rank);
  for (const Entry& e : entries_)
    writer.write(e.name, e.slice.flat_begin, e.data.data(), e.slice.numel());
  writer.commit();
}

void prepare_staging(const std::string& save, int64_t iteration) {
  const fs::path staging = staging_dir(save, iteration);
  std::error_code ec;
  // What interrupted saves left (no save of this job is in flight when a new one starts).
  for (const auto& e : fs::directory_iterator(save, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 &&
        parse_iteration_dir(name.substr(0, name.size() - 4)))
      fs::remove_all(e.path(), ec);
  }
  fs::create_directories(staging, ec);
  if (ec || !fs::is_directory(staging))
    throw Error("--save " + save + ": cannot create " + staging.string() +
                (ec ? " (" + ec.message() + ")" : ""));
}

void publish_checkpoint(const std::string& save, int64_t iteration, int world_size,
                        const nlohmann::json& state, int keep) {
  const fs::path staging = staging_dir(save, iteration);
  nlohmann::json tensors = nlohmann::json::object(), files = nlohmann::json::object();
  for (int r = 0; r < world_size; ++r) {
    const std::string name = rank_file_name(r);
    const SafetensorsFile f((staging / name).string());
    const auto it = f.metadata().find(kSlicesMetadataKey);
    if (it == f.metadata().end())
      throw Error(f.path() + ": no slice descriptions: not a Tessera rank file");
    try {
      for (nlohmann::json& s : nlohmann::json::parse(it->second)) {
        nlohmann::json& t = tensors[s.at("name").get<std::string>()];
        if (t.is_null())
          t = {{"shape", s.at("shape")}, {"dtype", "F32"}, {"slices", nlohmann::json::array()}};
        if (t["shape"] != s["shape"])
          throw Error(f.path() + ": tensor " + s["name"].get<std::string>() + " has shape " +
                      s["shape"].dump() + " here and " + t["shape"].dump() +
                      " in another rank's file");
        s["file"] = name;
        s.erase("name");
        s.erase("shape");
        t["slices"].push_back(std::move(s));
      }
    } catch (const nlohmann::json::exception& e) {
      throw Error(f.path() + ": malformed slice descriptions (" + e.what() + ")");
    }
  }
  // Every file of the checkpoint with its size (rank files and what travels along, such as a
  // tokenizer.json), so a reader notices a truncated or missing one.
  for (const auto& e : fs::directory_iterator(staging))
    if (e.is_regular_file() && e.path().filename() != "metadata.json")
      files[e.path().filename().string()] = {{"bytes", e.file_size()}};
  nlohmann::ordered_json meta;
  meta["format"] = kFormat;
  meta["version"] = kVersion;
  meta["iteration"] = iteration;
  meta["state"] = state;
  meta["files"] = files;
  meta["tensors"] = tensors;
  const std::string text = meta.dump(1) + "\n";
  AtomicFile out((staging / "metadata.json").string());
  out.write(text.data(), text.size());
  out.commit();
  sync_directory(staging);

  const fs::path final_dir = iteration_dir(save, iteration);
  if (fs::exists(final_dir)) {
    // The same iteration saved again (a job resumed from an older checkpoint into the same
    // directory): swap the two directories in one step, so iteration_dir is always a complete
    // checkpoint, then drop the old one (now under the staging name, which the next save
    // removes if this is interrupted).
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0)
      throw Error("cannot replace " + final_dir.string() + " by " + staging.string() + ": " +
                  std::strerror(errno));
    sync_directory(save);
    fs::remove_all(staging);
  } else {
    rename_or_throw(staging, final_dir);
  }
  sync_directory(save);
  const std::string pointer = std::to_string(iteration) + "\n";
  AtomicFile latest(latest_file(save));
  latest.write(pointer.data(), pointer.size());
  latest.commit();
  sync_directory(save);
  if (keep > 0) prune(save, keep, iteration);
}

// ---------------------------------------------------------------------------------------------
// Load

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir) {
  const std::string path = (fs::path(dir) / "metadata.json").string();
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(read_file(path, "checkpoint metadata"));
    if (meta.at("format") != kFormat)
      throw Error(path + ": format is " + meta["format"].dump() + ", expected \"" + kFormat + "\"");
    if (meta.at("version").get<int>() > kVersion)
      throw Error(path + ": version " + meta["version"].dump() + " is newer than this build reads (" +
                  std::to_string(kVersion) + ")");
    iteration_ = meta.at("iteration").get<int64_t>();
    state_ = meta.at("state");
    for (const auto& [file, info] : meta.at("files").items()) {
      const fs::path p = fs::path(dir) / file;
      std::error_code ec;
      const auto size = fs::file_size(p, ec);
      if (ec) throw Error(p.string() + ": missing (listed in " + path + ")");
      if (size != info.at("bytes").get<uint64_t>())
        throw Error(p.string() + ": " + std::to_string(size) + " bytes, but " + path + " records " +
                    info["bytes"].dump() + ": the file is truncated or was replaced");
    }
    for (const auto& [name, t] : meta.at("tensors").items()) {
      Entry e;
      e.shape = t.at("shape").get<std::vector<int64_t>>();
      for (const auto& s : t.at("slices")) {
        Source src{s.at("file").get<std::string>(), s.at("key").get<std::string>(),
                   s.at("xxh3").get<std::string>(),
                   TensorSlice::from_json(s, path + ": tensor " + name), {}, false};
        src.slice.global_shape = e.shape;
        src.slice.check_fits_global(path + ": tensor " + name);
        if (!meta["files"].contains(src.file))
          throw Error(path + ": tensor " + name + " refers to " + src.file +
                      ", which the checkpoint does not list");
        e.sources.push_back(std::move(src));
      }
      tensors_[name] = std::move(e);
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": malformed checkpoint metadata (" + e.what() + ")");
  }
}

CheckpointReader::~CheckpointReader() = default;

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : tensors_) out.push_back(name);
  return out;
}

const std::vector<int64_t>& CheckpointReader::shape(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw Error(dir_ + ": the checkpoint has no tensor " + name);
  return it->second.shape;
}

const SafetensorsFile& CheckpointReader::file(const std::string& name) {
  auto& f = files_[name];
  if (!f) f = std::make_unique<SafetensorsFile>((fs::path(dir_) / name).string());
  return *f;
}

void CheckpointReader::read(const std::string& name, const TensorSlice& target, float* out) {
  const std::vector<int64_t>& saved_shape = shape(name);
  auto shape_text = [](const std::vector<int64_t>& s) { return nlohmann::json(s).dump(); };
  if (saved_shape != target.global_shape)
    throw Error(dir_ + ": tensor " + name + " has shape " + shape_text(saved_shape) +
                " in the checkpoint but the model needs " + shape_text(target.global_shape));
  const std::vector<Run> needed = runs(target);
  int64_t wanted = 0, copied = 0;
  for (const Run& r : needed) wanted += r.length;
  for (Source& src : tensors_.at(name).sources) {
    if (src.runs.empty()) src.runs = runs(src.slice);
    const std::vector<Run>& have = src.runs;
    // Skip sources that cannot overlap (the common case under a different layout).
    if (have.empty() || needed.empty() ||
        have.back().global + have.back().length <= needed.front().global ||
        needed.back().global + needed.back().length <= have.front().global)
      continue;
    const SafetensorsFile& f = file(src.file);
    const std::string where = f.path() + ": tensor " + name + " (" + src.key + ")";
    if (!f.contains(src.key)) throw Error(where + ": not in the file");
    const SafeTensorInfo& info = f.info(src.key);
    if (info.dtype != SafeDType::kF32 || info.numel != src.slice.numel())
      throw Error(where + ": " + std::to_string(info.numel) + " " + safe_dtype_name(info.dtype) +
                  " elements, expected " + std::to_string(src.slice.numel()) + " F32");
    const void* data = f.data(src.key);
    if (!src.verified) {
      const std::string actual = checksum(data, info.data_end - info.data_begin);
      if (actual != src.checksum)
        throw Error(where + ": checksum mismatch (XXH3 " + actual + ", metadata.json records " +
                    src.checksum + "): the file is corrupted");
      src.verified = true;
    }
    copied += copy_overlap(have, data, needed, out, sizeof(float));
  }
  if (copied != wanted)
    throw Error(dir_ + ": tensor " + name + ": the checkpoint holds " + std::to_string(copied) +
                " of the " + std::to_string(wanted) + " elements this rank needs");
}

}  // namespace tessera::checkpoint
