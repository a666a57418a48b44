#include "tessera/io/direct_file_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::io {

std::unique_ptr<DirectFileWriter> DirectFileWriter::open(const std::string& path, int64_t size,
                                                         const Options& options) {
  TESSERA_CHECK(size >= 0 && options.staging_buffers >= 2 && options.staging_bytes > 0);
  std::optional<DirectFile> file = DirectFile::create_if_supported(path, size);
  if (!file) return nullptr;
  if (file->alignment().strictest() > kMaxAlignment) return nullptr;
  return std::unique_ptr<DirectFileWriter>(new DirectFileWriter(std::move(*file), size, options));
}

DirectFileWriter::DirectFileWriter(DirectFile file, int64_t size, const Options& options)
    : file_(std::move(file)), size_(size), block_(file_.alignment().offset), options_(options) {
  // A staging buffer holds whole blocks; a small file needs no more than its own size.
  const int64_t staging =
      std::min(align_up(std::max<int64_t>(options.staging_bytes, block_), block_),
               align_up(std::max<int64_t>(size, 1), block_));
  options_.staging_bytes = staging;
  for (int i = 0; i < options.staging_buffers; ++i)
    staging_.push_back(
        Staging{AlignedBuffer(staging, file_.alignment().memory, MemoryCategory::kOther)});
  io_ = make_async_io(options.aio, options.backend);
}

DirectFileWriter::~DirectFileWriter() {
  // The engine's destructor waits for the pieces it started; it must run before the buffers go.
  io_.reset();
}

DirectFileWriter::Staging& DirectFileWriter::free_staging() {
  Staging& s = staging_[next_staging_];
  next_staging_ = (next_staging_ + 1) % staging_.size();
  if (s.pending >= 0) {
    const AsyncIo::Ticket t = std::exchange(s.pending, -1);
    io_->wait(t);
  }
  return s;
}

void DirectFileWriter::write_whole_blocks(int64_t offset, const char* data, int64_t bytes) {
  while (bytes > 0) {
    Staging& s = free_staging();
    const int64_t n = std::min(bytes, options_.staging_bytes);
    std::memcpy(s.buffer.data(), data, static_cast<size_t>(n));
    s.pending = io_->submit({&file_, s.buffer.data(), n, offset, /*write=*/true});
    offset += n;
    data += n;
    bytes -= n;
  }
}

void DirectFileWriter::write_partial(int64_t offset, const char* data, int64_t bytes) {
  const int64_t block = offset / block_ * block_;
  auto [it, added] = partial_.try_emplace(block);
  PartialBlock& p = it->second;
  if (added) p.buffer = AlignedBuffer(block_, file_.alignment().memory, MemoryCategory::kOther);
  std::memcpy(p.buffer.as<char>() + (offset - block), data, static_cast<size_t>(bytes));
  p.filled += bytes;
  TESSERA_CHECK_MSG(p.filled <= block_, path() + ": a block's bytes were handed over twice");
  // Complete: written now (the block holding the file's end is complete only when the size is a
  // whole number of blocks; otherwise finish() writes it).
  if (p.filled == block_) {
    if (completed_blocks_.size() >= kCompletedBlocksInFlight) {
      io_->wait(completed_blocks_.front().second);  // long done, most likely
      completed_blocks_.pop_front();
    }
    const AsyncIo::Ticket t = io_->submit({&file_, p.buffer.data(), block_, block, /*write=*/true});
    completed_blocks_.emplace_back(std::move(p.buffer), t);
    partial_.erase(it);
  }
}

void DirectFileWriter::write_at(int64_t offset, const void* data, int64_t bytes) {
  TESSERA_CHECK_MSG(!finished_, path() + ": write after finish()");
  TESSERA_CHECK_MSG(offset >= 0 && bytes >= 0 && offset + bytes <= size_,
                    path() + ": a write of " + std::to_string(bytes) + " bytes at offset " +
                        std::to_string(offset) + " outside the file's " + std::to_string(size_) +
                        " bytes");
  const char* p = static_cast<const char*>(data);
  const int64_t end = offset + bytes;
  // [offset, end) = a partly covered head block, whole blocks, a partly covered tail block.
  const int64_t whole_begin = align_up(offset, block_);
  const int64_t whole_end = std::max(whole_begin, end / block_ * block_);
  const int64_t head_end = std::min(whole_begin, end);
  if (head_end > offset) write_partial(offset, p, head_end - offset);
  if (whole_end > whole_begin)
    write_whole_blocks(whole_begin, p + (whole_begin - offset), whole_end - whole_begin);
  if (end > whole_end) write_partial(whole_end, p + (whole_end - offset), end - whole_end);
}

void DirectFileWriter::finish() {
  TESSERA_CHECK_MSG(!finished_, path() + ": finish() twice");
  finished_ = true;
  // Incomplete blocks (the file's last one, and any whose bytes never all came) go out whole,
  // zeros where nothing came; the file is then cut back to its size.
  for (auto& [offset, block] : partial_)
    io_->submit({&file_, block.buffer.data(), block_, offset, /*write=*/true});
  io_->wait_all();
  for (Staging& s : staging_) s.pending = -1;
  partial_.clear();
  completed_blocks_.clear();
  if (::ftruncate(file_.fd(), size_) != 0)
    throw Error("cannot set the size of " + path() + " to " + std::to_string(size_) + ": " +
                std::strerror(errno));
}

}  // namespace tessera::io
