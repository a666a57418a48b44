#include "tessera/core/threads.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace tessera {

int default_num_threads() {
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  long local_ranks = 1;
  for (const char* var :
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* v = std::getenv(var)) {
      local_ranks = std::max(1L, std::atol(v));
      break;
    }
  }
  // A launcher that binds the process to fewer cores (Open MPI binds each rank to one core when it
  // starts at most 2) gets no more threads than it may run on: two threads sharing one core run
  // slower than one.
  long allowed = cores;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) allowed = std::max(1, CPU_COUNT(&mask));
  return static_cast<int>(std::max(1L, std::min(cores / local_ranks, allowed)));
}

int set_num_threads(int n) {
  if (n <= 0) n = default_num_threads();
  omp_set_num_threads(n);
  return n;
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace tessera
