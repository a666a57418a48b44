#include "tessera/core/threads.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace tessera {

int default_num_threads() {
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  long local_ranks = 1;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* v = std::getenv(var)) {
      local_ranks = std::max(1L, std::atol(v));
      break;
    }
  }
  return static_cast<int>(std::max(1L, cores / local_ranks));
}

int set_num_threads(int n) {
  if (n <= 0) n = default_num_threads();
  omp_set_num_threads(n);
  return n;
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace tessera
