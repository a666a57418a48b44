#!/bin/bash
# The resident set beside the memory accountant's peak: for
# a few layouts of a small GPT-style model, one iteration of tessera-train each, the memory
# report's "peak of all categories at once" (tessera-plan's peak_bytes) and "peak resident set
# of the process" of the rank it names, and their difference: what tessera-plan's resident-set
# prediction adds (the process's own baseline: libraries, MPI, threads, data; --calibrate
# measures it) and takes away (pages ZeRO 3 gives back). docs/planning.md, "Memory: the
# resident set".
# Usage: bench/rss_gap.sh [BUILD_BIN_DIR]
set -euo pipefail
BIN="${1:-build/bin}/tessera-train"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FLAGS=(--mock-data --lr 1e-3 --train-iters 1 --micro-batch-size 1 --global-batch-size 4
       --num-threads 1 --eval-interval 0 --bf16 --model gpt2-tiny --hidden-size 256
       --num-attention-heads 4 --num-layers 4)
WIDE=(--hidden-size 1024 --num-attention-heads 8)
echo "| ranks | layout | accountant's peak (MiB) | peak RSS (MiB) | RSS - peak |"
echo "| --- | --- | --- | --- | --- |"
layout() {  # layout NP LABEL FLAGS...
  local np="$1" label="$2"
  shift 2
  mpirun --oversubscribe -np "$np" "$BIN" "${FLAGS[@]}" "$@" 2>&1 |
    awk -v np="$np" -v label="$label" '
      /peak of all categories at once/ { peak = $NF }
      /peak resident set of the process/ { rss = $NF }
      END { printf "| %d | %s | %.1f | %.1f | %+.1f |\n", np, label, peak, rss, rss - peak }'
}
layout 1 "one rank"
layout 2 "DP 2, ZeRO 1" --zero-stage 1
layout 2 "DP 2, ZeRO 3" --zero-stage 3
layout 2 "PP 2" --pipeline-model-parallel-size 2
layout 2 "TP 2" --tensor-model-parallel-size 2
layout 4 "TP 2 x DP 2, ZeRO 2" --tensor-model-parallel-size 2 --zero-stage 2
layout 1 "one rank, hidden 1024" "${WIDE[@]}"
layout 2 "DP 2, ZeRO 3, hidden 1024" "${WIDE[@]}" --zero-stage 3
