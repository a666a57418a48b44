#include "tessera/checkpoint/rank_file_writer.h"

#include <xxhash.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/core/error.h"

namespace tessera::checkpoint {
namespace {

struct FreeXxh3 {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};

}  // namespace

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.safetensors", rank);
  return buf;
}

std::string checksum_text(uint64_t xxh3) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, xxh3);
  return buf;
}

struct RankFileWriter::Slice {
  std::string name, key;
  TensorSlice slice;
  uint64_t offset = 0;                           // of its data in the file
  int64_t written = 0;                           // elements received
  std::unique_ptr<XXH3_state_t, FreeXxh3> hash;  // while partly received
  std::string checksum;                          // once complete
};

RankFileWriter::RankFileWriter(WriteMode mode, const io::DirectFileWriter::Options& io)
    : mode_(mode), io_options_(io) {}
// The direct writer first: it waits for its writes before the temporary is removed.
RankFileWriter::~RankFileWriter() { direct_.reset(); }

void RankFileWriter::declare(const std::string& name, const TensorSlice& slice) {
  TESSERA_CHECK_MSG(!file_, "RankFileWriter::declare after open");
  TESSERA_CHECK(slice.numel() >= 0);
  Slice s;
  s.name = name;
  s.key = name + "@" + std::to_string(slice.flat_begin);
  s.slice = slice;
  slices_.push_back(std::move(s));
  bytes_ += slice.numel() * static_cast<int64_t>(sizeof(float));
}

SafetensorsLayout RankFileWriter::layout(bool with_checksums) const {
  std::vector<SafeTensorView> views;
  nlohmann::json descriptions = nlohmann::json::array();
  views.reserve(slices_.size());
  for (const Slice& s : slices_) {
    views.push_back({s.key, SafeDType::kF32, {s.slice.numel()}, nullptr});
    nlohmann::json j = s.slice.to_json();
    j["name"] = s.name;
    j["key"] = s.key;
    j["shape"] = s.slice.global_shape;
    // Before the data: a placeholder of the checksum's fixed width.
    j["xxh3"] = with_checksums ? s.checksum : checksum_text(0);
    descriptions.push_back(std::move(j));
  }
  return safetensors_layout(path_, views, {{kSlicesMetadataKey, descriptions.dump()}});
}

void RankFileWriter::open(const std::string& dir, int rank) {
  TESSERA_CHECK_MSG(!file_, "RankFileWriter::open twice");
  path_ = (std::filesystem::path(dir) / rank_file_name(rank)).string();
  by_name_.clear();
  for (size_t i = 0; i < slices_.size(); ++i) by_name_[slices_[i].name].push_back(i);
  for (auto& [name, list] : by_name_) {
    std::sort(list.begin(), list.end(), [&](size_t a, size_t b) {
      return slices_[a].slice.flat_begin < slices_[b].slice.flat_begin;
    });
    for (size_t k = 1; k < list.size(); ++k) {
      const TensorSlice &prev = slices_[list[k - 1]].slice, &next = slices_[list[k]].slice;
      if (next.flat_begin < prev.flat_end)
        throw Error(path_ + ": tensor " + name + ": slices [" + std::to_string(prev.flat_begin) +
                    ", " + std::to_string(prev.flat_end) + ") and [" +
                    std::to_string(next.flat_begin) + ", " + std::to_string(next.flat_end) +
                    ") overlap: expected each element in one slice");
    }
  }
  const SafetensorsLayout planned = layout(false);
  header_bytes_ = planned.header.size();
  for (size_t i = 0; i < slices_.size(); ++i) slices_[i].offset = planned.offsets[i];
  file_ = std::make_unique<AtomicFile>(path_);
  if (mode_ == WriteMode::kDirectWhereSupported)
    direct_ = io::DirectFileWriter::open(file_->temporary_path(),
                                         static_cast<int64_t>(planned.file_bytes), io_options_);
}

void RankFileWriter::write_bytes(uint64_t offset, const void* data, size_t bytes) {
  if (direct_)
    direct_->write_at(static_cast<int64_t>(offset), data, static_cast<int64_t>(bytes));
  else
    file_->write_at(offset, data, bytes);
}

void RankFileWriter::write(const std::string& name, int64_t flat_begin, const float* data,
                           int64_t count) {
  TESSERA_CHECK_MSG(file_ && !committed_, "RankFileWriter::write outside open() .. commit()");
  TESSERA_CHECK(count >= 0);
  // The last slice of `name` starting at or before flat_begin.
  size_t index = slices_.size();
  if (const auto it = by_name_.find(name); it != by_name_.end()) {
    const auto after =
        std::upper_bound(it->second.begin(), it->second.end(), flat_begin,
                         [&](int64_t v, size_t i) { return v < slices_[i].slice.flat_begin; });
    if (after != it->second.begin()) index = *(after - 1);
  }
  if (index == slices_.size() || flat_begin >= slices_[index].slice.flat_end)
    throw Error(path_ + ": tensor " + name + ": no declared slice holds element " +
                std::to_string(flat_begin));
  Slice& s = slices_[index];
  auto where = [&] {
    return path_ + ": slice " + s.key + " (elements [" + std::to_string(s.slice.flat_begin) + ", " +
           std::to_string(s.slice.flat_end) + "))";
  };
  const int64_t next = s.slice.flat_begin + s.written;
  if (flat_begin != next)
    throw Error(where() + ": a piece starts at element " + std::to_string(flat_begin) +
                " but the data so far ends at " + std::to_string(next) +
                ": expected pieces in order, each continuing the last");
  if (count > s.slice.flat_end - flat_begin)
    throw Error(where() + ": a piece of " + std::to_string(count) + " elements from element " +
                std::to_string(flat_begin) + " runs past the slice's end");
  if (count == 0) return;
  const size_t nbytes = static_cast<size_t>(count) * sizeof(float);
  write_bytes(s.offset + static_cast<uint64_t>(s.written) * sizeof(float), data, nbytes);
  if (!s.hash) {
    s.hash.reset(XXH3_createState());
    TESSERA_CHECK(s.hash && XXH3_64bits_reset(s.hash.get()) == XXH_OK);
  }
  TESSERA_CHECK(XXH3_64bits_update(s.hash.get(), data, nbytes) == XXH_OK);
  s.written += count;
  if (s.written == s.slice.numel()) {
    s.checksum = checksum_text(XXH3_64bits_digest(s.hash.get()));
    s.hash.reset();
  }
}

void RankFileWriter::commit() {
  TESSERA_CHECK_MSG(file_ && !committed_, "RankFileWriter::commit without open()");
  for (Slice& s : slices_) {
    if (s.written != s.slice.numel())
      throw Error(path_ + ": slice " + s.key + " received " + std::to_string(s.written) +
                  " of its " + std::to_string(s.slice.numel()) + " elements");
    if (s.slice.numel() == 0) s.checksum = checksum_text(XXH3_64bits(nullptr, 0));
  }
  const std::string header = layout(true).header;
  TESSERA_CHECK_MSG(header.size() == header_bytes_, "the header changed length with its checksums");
  write_bytes(0, header.data(), header.size());
  if (direct_) {
    direct_->finish();
    direct_.reset();
  }
  file_->commit();
  committed_ = true;
}

}  // namespace tessera::checkpoint
