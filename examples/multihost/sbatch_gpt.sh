#!/bin/bash
# The same run under SLURM: 2 nodes, 4 tasks a node, 2 cores a task. srun starts the ranks
# (PMIx); Open MPI takes the rank, size and local size from it. Submit from this directory:
# sbatch sbatch_gpt.sh
#SBATCH --job-name=tessera-gpt2
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=2
#SBATCH --time=24:00:00
#SBATCH --output=%x-%j.out
set -eu
source "${SLURM_SUBMIT_DIR:-.}/gpt2_350m_args.sh"
# End the job when one task fails, as mpirun does.
# Threads: the cores SLURM gave each task (Tessera's default counts every core of the node).
srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores tessera-train "${GPT_ARGS[@]}" \
  --num-threads "${SLURM_CPUS_PER_TASK:-2}"
