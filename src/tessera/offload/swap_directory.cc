#include "tessera/offload/swap_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "tessera/core/error.h"

namespace tessera::offload {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "tessera-swap.";
constexpr const char* kLock = ".lock";

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "host";
  return host;
}

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

int SwapDirectory::remove_stale(const std::string& nvme_path) {
  int removed = 0;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(nvme_path, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || !entry.is_directory(ec)) continue;
    const std::string lock = (entry.path() / kLock).string();
    const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC);
    bool dead = false;
    if (fd >= 0) {
      // A lock we can take has no live owner.
      dead = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
      ::close(fd);
    } else if (errno == ENOENT) {
      const auto age = fs::file_time_type::clock::now() - fs::last_write_time(entry.path(), ec);
      dead = !ec && age > std::chrono::minutes(1);
    }
    if (dead && fs::remove_all(entry.path(), ec) != static_cast<std::uintmax_t>(-1) && !ec)
      ++removed;
  }
  return removed;
}

SwapDirectory::SwapDirectory(const std::string& nvme_path, const std::string& tag,
                             const std::string& what)
    : nvme_path_(nvme_path) {
  if (nvme_path.empty()) throw Error(what + " is not set: give the directory for swap files");
  std::error_code ec;
  if (!fs::exists(nvme_path, ec))
    throw Error(what + " \"" + nvme_path + "\" does not exist: expected a writable directory");
  if (!fs::is_directory(nvme_path, ec))
    throw Error(what + " \"" + nvme_path + "\" is not a directory");
  if (::access(nvme_path.c_str(), W_OK | X_OK) != 0)
    throw Error(what + " \"" + nvme_path + "\" is not writable (" + errno_text(errno) +
                "): expected a writable directory");
  remove_stale(nvme_path);
  path_ =
      (fs::path(nvme_path) / (kPrefix + host_name() + "." + std::to_string(::getpid()) + "." + tag))
          .string();
  fs::remove_all(path_, ec);  // a dead run of the same pid (pids are reused)
  if (::mkdir(path_.c_str(), 0700) != 0)
    throw Error(what + ": cannot create " + path_ + ": " + errno_text(errno));
  const std::string staging = file(".lock.new");
  lock_fd_ = ::open(staging.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX) != 0 ||
      ::rename(staging.c_str(), file(kLock).c_str()) != 0) {
    const int err = errno;
    fs::remove_all(path_, ec);
    throw Error(what + ": cannot lock " + path_ + ": " + errno_text(err));
  }
}

SwapDirectory::~SwapDirectory() {
  std::error_code ec;
  fs::remove_all(path_, ec);  // the files first, then the lock goes with the descriptor
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::string SwapDirectory::file(const std::string& name) const {
  return (fs::path(path_) / name).string();
}

void SwapDirectory::check_space(int64_t bytes, const std::string& what) const {
  struct statvfs st {};
  if (::statvfs(path_.c_str(), &st) != 0)
    throw Error(what + ": cannot query the free space of " + nvme_path_ + ": " + errno_text(errno));
  const int64_t available = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
  if (available < bytes)
    throw Error(what + " \"" + nvme_path_ + "\" has " + std::to_string(available) +
                " bytes free but the swap files need " + std::to_string(bytes) +
                ": free space or give a larger device");
}

}  // namespace tessera::offload
