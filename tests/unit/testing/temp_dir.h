// A fresh directory under $TMPDIR (default /tmp), or under `base`, for tests that write files;
// removed with everything in it when the object goes out of scope. Tests of direct I/O pass the
// working directory (the build tree, on the repository's disk): tmpfs accepts unaligned
// O_DIRECT and would hide alignment errors.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace tessera::testing {

class TempDir {
 public:
  explicit TempDir(std::string base = "", const std::string& prefix = "tessera-test") {
    const char* env = std::getenv("TMPDIR");
    if (base.empty()) base = env != nullptr && *env ? env : "/tmp";
    std::string tmpl = base + "/" + prefix + "-XXXXXX";
    char* made = ::mkdtemp(tmpl.data());
    if (made == nullptr) {
      ADD_FAILURE() << "mkdtemp failed for " << tmpl;
      return;
    }
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Whole file as bytes (empty if it cannot be read).
inline std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

// Replaces a file's contents.
inline void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

}  // namespace tessera::testing
