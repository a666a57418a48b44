#include "tessera/core/file_io.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera {

std::string read_file(const std::string& path, const std::string& what) {
  if (path.empty()) throw Error(what + " is not given: expected a file path");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error("cannot read " + what + " '" + path + "': it is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + what + " '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error("cannot read " + what + " '" + path + "': read error");
  return ss.str();
}

}  // namespace tessera
