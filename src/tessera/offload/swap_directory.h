// One rank's private directory of swap files under a user's NVMe path (DeepSpeed's nvme_path):
// <nvme_path>/tessera-swap.<host>.<pid>.<tag>/. The files in it are temporaries of the run: the
// destructor removes the directory, and a run that died without it (a kill, a crash) leaves a
// directory that the next SwapDirectory made under the same path removes.
//
// How a dead run's directory is told from a live one: its owner holds an exclusive flock on
// <dir>/.lock for its whole life (the kernel drops it when the process dies, however it dies).
// The lock file is created and locked under a temporary name and only then renamed to .lock, so
// a scan never sees an unlocked .lock of a live run; a directory without .lock is removed only
// once it is a minute old (a run between mkdir and rename is younger than that).
#pragma once

#include <cstdint>
#include <string>

namespace tessera::offload {

class SwapDirectory {
 public:
  // Creates the directory under `nvme_path`, after removing those of dead runs. `tag` tells
  // a process's directories apart ("optimizer", "param"). `what` names the setting the path came
  // from in errors (e.g. "zero_optimization.offload_optimizer.nvme_path"). tessera::Error, one
  // line, when nvme_path is missing, not a directory or not writable.
  SwapDirectory(const std::string& nvme_path, const std::string& tag, const std::string& what);
  ~SwapDirectory();
  SwapDirectory(const SwapDirectory&) = delete;
  SwapDirectory& operator=(const SwapDirectory&) = delete;

  const std::string& path() const { return path_; }
  // The path of a swap file `name` inside the directory.
  std::string file(const std::string& name) const;
  // tessera::Error naming `what`, the path, the bytes needed and those free when the file
  // system has less than `bytes` available: checked before any swap file is written, so a full
  // disk is reported before training starts.
  void check_space(int64_t bytes, const std::string& what) const;

  // Removes the swap directories of dead runs under `nvme_path`; returns how many.
  static int remove_stale(const std::string& nvme_path);

 private:
  std::string nvme_path_, path_;
  int lock_fd_ = -1;
};

}  // namespace tessera::offload
