// Thread configuration. Each process uses one OpenMP team for our kernels and for oneDNN's GEMMs.
// The default is cores on this node ÷ processes on this node (from Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE), so `mpirun -np 2` on 2 cores runs one thread per rank, and never
// more than the cores the process is bound to (`mpirun -np 1` binds to one core unless told
// --bind-to none).
#pragma once

namespace tessera {

// Number of threads the default policy picks for this process (at least 1).
int default_num_threads();
// Applies `n` threads (n <= 0 means the default) to OpenMP (which oneDNN uses too). Returns the count set.
int set_num_threads(int n);
int num_threads();

}  // namespace tessera
