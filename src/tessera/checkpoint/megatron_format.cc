#include "tessera/checkpoint/megatron_format.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tessera/core/error.h"

namespace tessera::checkpoint {
namespace {

namespace fs = std::filesystem;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// The first `limit` bytes of a file ("" if unreadable): enough to see a small JSON's keys.
std::string head_of(const fs::path& p, size_t limit) {
  std::ifstream in(p, std::ios::binary);
  std::string text(limit, '\0');
  in.read(text.data(), static_cast<std::streamsize>(limit));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

// The format of one directory's own files.
std::string format_of(const fs::path& dir) {
  if (is_file(dir / "model_optim_rng.pt") || is_file(dir / "model_rng.pt")) return "legacy";
  if (is_file(dir / ".metadata") || is_file(dir / "common.pt")) return "torch_dist";
  // Megatron's metadata.json is a few dozen bytes; Tessera's never names a sharded backend.
  if (is_file(dir / "metadata.json") &&
      head_of(dir / "metadata.json", 4096).find("\"sharded_backend\"") != std::string::npos)
    return "torch_dist";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".distcp") return "torch_dist";
    if (name.rfind("mp_rank_", 0) == 0 && e.is_directory(ec) &&
        (is_file(e.path() / "model_optim_rng.pt") || is_file(e.path() / "model_rng.pt")))
      return "legacy";
  }
  return "";
}

}  // namespace

std::string megatron_checkpoint_format(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec)) return "";
  if (std::string f = format_of(d); !f.empty()) return f;
  // A --save directory: the iteration its tracker names (Megatron and Tessera share the name).
  const fs::path tracker = d / "latest_checkpointed_iteration.txt";
  if (!is_file(tracker)) return "";
  std::string text = head_of(tracker, 64);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r'))
    text.pop_back();
  if (text == "release") return format_of(d / "release");
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
    return "";
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07lld", std::stoll(text));
  return format_of(d / name);
}

void refuse_megatron_checkpoint(const std::string& dir) {
  const std::string format = megatron_checkpoint_format(dir);
  if (format.empty()) return;
  const std::string what =
      format == "legacy" ? "a Megatron-LM legacy checkpoint (mp_rank_*/model_optim_rng.pt)"
                         : "a Megatron-LM torch_dist checkpoint (.metadata, *.distcp, common.pt)";
  throw Error(dir + ": " + what +
              ", which Tessera cannot read: convert it to a Hugging Face model directory "
              "(Megatron-LM's tools/checkpoint/convert.py with a Hugging Face saver, or "
              "Megatron-Bridge's export) and --load that directory (docs/checkpoints.md)");
}

}  // namespace tessera::checkpoint
