#!/bin/bash
# ZeRO memory per rank: stages 0-3 at DP 1, 2, 4 and 8 for a 51M-parameter GPT-2-style model,
# measured (MiB) / formula (MiB) for parameters, gradients, optimizer state and their sum, and
# the peak resident set of rank 0. See bench/zero_memory_main.cc.
#   bash bench/zero_memory.sh [BUILD_BIN_DIR] [--dtype bf16|fp32]
set -eu
BIN="${1:-build/bin}"
shift || true
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "| stage | DP | dtype | Ψ/rank | parameters: measured / formula | gradients | optimizer | model states | peak RSS |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for stage in 0 1 2 3; do
  for dp in 1 2 4 8; do
    mpirun --oversubscribe -np "$dp" "$BIN/zero_memory" --stage "$stage" "$@"
  done
done
