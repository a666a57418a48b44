#!/bin/bash
# ZeRO 3 parameter offload: what the optimizer step holds of the compute-dtype parameters
# (docs/offload.md, "What stays in memory, and the peak"). A LLaMA-style model of ~0.4 B
# parameters trains a few iterations on one process with every parameter part and the optimizer
# state on NVMe (ZeRO 3, DP 1, bf16, max_in_cpu 0), on the file system of DIR (default: the
# build tree's parent). Prints the trainer's memory report, the peak resident set (/usr/bin/time)
# and, for reference, the rank's whole bf16 shard and its largest unit's part: a step that held
# the whole shard until it ended peaked about a shard above one that writes each part out as it
# passes it. Run it with two builds to compare them. Needs ~6 GB free on DIR and ~3 minutes.
#   bash bench/offload_param_peak.sh [BUILD_BIN_DIR] [DIR] [--iters N]
set -eu
BIN="${1:-build/bin}"
DIR="${2:-$(cd "$BIN/../.." && pwd)}"
shift 2 || shift $# || true
ITERS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) ITERS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
WORK="$(mktemp -d "$DIR/tessera-param-peak.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
[ "$(stat -f -c %T "$DIR")" = tmpfs ] && echo "warning: tmpfs is not a disk; pass another DIR"
MODEL=(--model llama-tiny --num-layers 24 --hidden-size 1024 --num-attention-heads 16
       --num-query-groups 16 --ffn-hidden-size 2816 --vocab-size 32000 --seq-length 128
       --max-position-embeddings 128)
/usr/bin/time -v "$BIN/tessera-train" "${MODEL[@]}" --mock-data --bf16 --zero-stage 3 \
  --micro-batch-size 1 --global-batch-size 1 --train-iters "$ITERS" --eval-iters 0 \
  --lr 1e-4 --log-interval 1 --num-threads "$(nproc)" \
  --offload-param-nvme-path "$WORK" --offload-param-max-in-cpu 0 \
  --offload-optimizer-nvme-path "$WORK" --offload-sub-group-size 20000000 \
  --offload-buffer-count 4 --offload-pipeline >"$WORK/train.out" 2>"$WORK/time.txt"
grep -E '^> (model|offload|memory report|  )' "$WORK/train.out"
grep '^ iteration' "$WORK/train.out" | sed 's/ | number of skipped.*tokens/ | ... tokens/'
python3 - "$WORK/time.txt" "$WORK/train.out" <<'PY'
import re, sys
rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(sys.argv[1]).read()).group(1))
out = open(sys.argv[2]).read()
params = float(re.search(r"model: .*?, (\d+) parameters", out).group(1))
layer = 4 * 1024 * 1024 + 3 * 1024 * 2816  # one layer's weights (norms aside)
largest = max(layer, 32000 * 1024)          # the embedding (and the untied output layer)
print(f"parameters: {params/1e9:.3f} B; the rank's whole bf16 shard {params*2/2**20:.0f} MiB; "
      f"the largest unit's part {largest*2/2**20:.0f} MiB (a layer's {layer*2/2**20:.0f} MiB)")
print(f"peak resident set (/usr/bin/time): {rss_kb/1024:.0f} MiB")
PY
