#!/bin/bash
# ZeRO-Infinity on this machine (docs/offload.md), on the file system of DIR (default: the build
# tree's parent, i.e. the repository's disk; never tmpfs):
#  1. fio's sequential O_DIRECT write and read rates (1 MiB blocks, queue depth 8, io_uring),
#     and the optimizer-state streaming rate of Tessera's own code path (bench/offload_stream:
#     NvmeStateStorage's initial write, read-only visit and step visit) on the same file system,
#     with the share of fio's rate it reaches.
#  2. Larger than memory, for real: a LLaMA-style model of 1.78 B parameters, whose model states
#     (bf16 weights 2 B + fp32 gradients 4 B + fp32 master weights, Adam's two moments 12 B per
#     parameter: 32 GB) exceed this machine's 24 GiB of RAM, trains a few iterations on one
#     process with its optimizer state on NVMe (ZeRO 1, DP 1; the fp32 gradients follow it at the
#     accumulation boundary: 4 B more per parameter each way per iteration). Prints the trainer's
#     own memory report (theory beside measurement), the peak resident set (/usr/bin/time) beside
#     RAM, the seconds per iteration, the I/O rate and the hidden share of I/O (metrics file).
#     With --save, the run then saves a checkpoint (streamed from the swap file: 21 GB more on
#     DIR) and the saved line is printed beside the peak resident set, with the save's rate
#     against fio's. --small trains a 0.37 B model instead (4.5 GB of optimizer state, in
#     memory's reach: a quick look at the same code paths, not a larger-than-memory run).
# Needs ~45 GB free on DIR (the 21 GB swap file, fio's 4 GB file) and ~10 minutes.
#   bash bench/offload.sh [BUILD_BIN_DIR] [DIR] [--iters N] [--skip-model] [--save] [--small]
set -eu
BIN="${1:-build/bin}"
DIR="${2:-$(cd "$BIN/../.." && pwd)}"
shift 2 || shift $# || true
ITERS=3
SKIP_MODEL=0
SAVE=0
SMALL=0
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) ITERS="$2"; shift 2 ;;
    --skip-model) SKIP_MODEL=1; shift ;;
    --save) SAVE=1; shift ;;
    --small) SMALL=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
WORK="$(mktemp -d "$DIR/tessera-offload-bench.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
echo "file system of $DIR: $(stat -f -c %T "$DIR"), $(df -h --output=avail "$DIR" | tail -1 | tr -d ' ') free"
[ "$(stat -f -c %T "$DIR")" = tmpfs ] && echo "warning: tmpfs is not a disk; pass another DIR"

# fio_rate RW: fio's sequential O_DIRECT rate (GB/s) over a 4 GB file in $WORK. Writes
# overwrite the file (--overwrite=1: fio writes it once first, untimed), which is faster here
# than extending a new file: the stricter reference.
fio_rate() {
  fio --name=seq --directory="$WORK" --filename=fio.dat --rw="$1" --bs=1M --size=4G --direct=1 \
    --ioengine=io_uring --iodepth=8 --numjobs=1 --overwrite=1 --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; d=j["write" if sys.argv[1]=="write" else "read"]; print("%.2f" % (d["bw_bytes"]/1e9))' "$1"
}
echo "== 1. streaming rate against fio (same file system, same run) =="
# The disk's rate drifts (a shared virtual disk here): three rounds, each fio write, fio read
# and Tessera's three phases back to back; the medians are compared.
for round in 1 2 3; do
  echo "fio_write $(fio_rate write)" >>"$WORK/rates.txt"
  echo "fio_read $(fio_rate read)" >>"$WORK/rates.txt"
  "$BIN/offload_stream" --dir "$WORK" --gb 4 --sub-group-size 5e7 --buffers 4 --pipeline \
    --queue-depth 8 | tee -a "$WORK/stream.txt" | sed "s/^/round $round: /"
done
rm -f "$WORK/fio.dat"
python3 - "$WORK/stream.txt" "$WORK/rates.txt" <<'PY'
import re, statistics, sys
text = open(sys.argv[1]).read()
rates = [l.split() for l in open(sys.argv[2])]
med = lambda xs: statistics.median(xs)
fw = med([float(v) for k, v in rates if k == "fio_write"])
fr = med([float(v) for k, v in rates if k == "fio_read"])
w = med([float(x) for x in re.findall(r"write \(initial state\): ([0-9.]+)", text)])
r = med([float(x) for x in re.findall(r"read \(read-only visit\): ([0-9.]+)", text)])
s = med([float(x) for x in re.findall(r"\(step visit\): ([0-9.]+)", text)])
print(f"fio sequential O_DIRECT (1 MiB blocks, queue depth 8, io_uring), median of 3: "
      f"write {fw:.2f} GB/s, read {fr:.2f} GB/s")
open(sys.argv[2] + ".medians", "w").write(f"{fw} {fr}\n")  # for the save's rate below
print(f"optimizer-state streaming / fio, medians: write {w:.2f}/{fw:.2f} = {100*w/fw:.0f} %, "
      f"read {r:.2f}/{fr:.2f} = {100*r/fr:.0f} %; a step's visit moves {s:.2f} GB/s each way")
PY
[ "$SKIP_MODEL" -eq 1 ] && exit 0

if [ "$SMALL" -eq 1 ]; then
  echo "== 2. a 0.37 B model (--small: within RAM), trained with its optimizer state on NVMe =="
else
  echo "== 2. a model whose model states exceed RAM, trained with its optimizer state on NVMe =="
fi
MODEL=(--model llama-tiny --num-layers 32 --hidden-size 2048 --num-attention-heads 16
       --num-query-groups 16 --ffn-hidden-size 5632 --vocab-size 32000 --seq-length 256
       --max-position-embeddings 256)
SUB_GROUP=50000000
if [ "$SMALL" -eq 1 ]; then
  MODEL=(--model llama-tiny --num-layers 24 --hidden-size 1024 --num-attention-heads 16
         --num-query-groups 16 --ffn-hidden-size 2816 --vocab-size 32000 --seq-length 128
         --max-position-embeddings 128)
  SUB_GROUP=20000000
fi
save=()
[ "$SAVE" -eq 1 ] && save=(--save "$WORK/ckpt")
ram=$(awk '/MemTotal/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)
# The disk's own counters once a second while the model runs (/proc/diskstats: sectors read and
# written), so the save's rate can be set beside what the disk did meanwhile.
DEV="$(basename "$(df --output=source "$DIR" | tail -1)")"
( while sleep 1; do
    awk -v d="$DEV" -v t="$(date +%s.%N)" '$3 == d { print t, $6, $10 }' /proc/diskstats
  done ) >"$WORK/diskstats.txt" 2>/dev/null &
SAMPLER=$!
/usr/bin/time -v "$BIN/tessera-train" "${MODEL[@]}" --mock-data --bf16 --zero-stage 1 \
  --micro-batch-size 1 --global-batch-size 1 --train-iters "$ITERS" --eval-iters 0 \
  --lr 1e-4 --log-interval 1 --num-threads "$(nproc)" \
  --offload-optimizer-nvme-path "$WORK" --offload-sub-group-size "$SUB_GROUP" \
  --offload-buffer-count 4 --offload-pipeline --offload-fast-init \
  --metrics-file "$WORK/metrics.jsonl" "${save[@]}" >"$WORK/train.out" 2>"$WORK/time.txt"
kill "$SAMPLER" 2>/dev/null || true
grep -E '^> (model|offload|memory report|saved checkpoint|  )' "$WORK/train.out"
grep '^ iteration' "$WORK/train.out" | sed 's/ | number of skipped.*tokens/ | ... tokens/'
python3 - "$WORK/metrics.jsonl" "$WORK/time.txt" "$WORK/train.out" "$ram" "$WORK/rates.txt.medians" "$WORK/diskstats.txt" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(sys.argv[2]).read()).group(1))
out = open(sys.argv[3]).read()
params = float(re.search(r"model: .*?, (\d+) parameters", out).group(1))
theory = sum(float(m) for m in re.findall(r"^>   (?:parameters|gradients|optimizer state|activations|communication buffers)\s+([0-9.]+) \|", out, re.M))
ram_gib = float(sys.argv[4])
states = params * 18
print(f"parameters: {params/1e9:.3f} B; model states (18 B/parameter): {states/2**30:.1f} GiB "
      f"against {ram_gib} GiB of RAM")
print(f"predicted bound (memory report theory, all categories but 'other'): {theory/1024:.2f} GiB; "
      f"peak resident set (/usr/bin/time): {rss_kb/2**20:.2f} GiB = {100*rss_kb/2**20/ram_gib:.0f} % of RAM")
steady = rows[1:] if len(rows) > 1 else rows
for r in rows:
    moved = r["io_read_bytes"] + r["io_write_bytes"]
    print(f"iteration {r['iteration']}: {r['iter_time_s']:.1f} s, I/O {r['io_read_bytes']/1e9:.1f} GB read + "
          f"{r['io_write_bytes']/1e9:.1f} GB written in {r['io_busy_s']:.1f} s busy "
          f"({moved/1e9/r['io_busy_s']:.2f} GB/s), hidden {100*r['io_hidden_fraction']:.0f} %, "
          f"loss {r['lm_loss']:.4f}")
mean = lambda k: sum(r[k] for r in steady) / len(steady)
print(f"steady state (iterations {steady[0]['iteration']}-{steady[-1]['iteration']}): "
      f"{mean('iter_time_s'):.1f} s/iteration, hidden I/O {100*mean('io_hidden_fraction'):.0f} %")
saved = re.search(r"^> saved checkpoint at iteration \d+ to .*?: ([0-9.]+) GB in ([0-9.]+) s", out, re.M)
if saved:
    fio_write, fio_read = (float(v) for v in open(sys.argv[5]).read().split())
    gb, s = float(saved.group(1)), float(saved.group(2))
    # The save reads as much from the swap file as it writes to the checkpoint, on one disk.
    print(f"save: {gb:.1f} GB written (and {gb:.1f} GB read from the swap file) in {s:.0f} s = "
          f"{gb/s:.2f} GB/s, {100*gb/s/fio_write:.0f} % of fio's write rate "
          f"(both directions together {2*gb/s:.2f} GB/s)")
    # The disk during the save: the last whole seconds of the run (the save ends it), per second.
    samples = [tuple(float(v) for v in l.split()) for l in open(sys.argv[6]) if l.strip()]
    rates = [((b[1] - a[1]) * 512 / 1e9 / (b[0] - a[0]), (b[2] - a[2]) * 512 / 1e9 / (b[0] - a[0]))
             for a, b in zip(samples, samples[1:])]
    window = rates[-int(s) + 1:-1] if int(s) > 3 else []
    if window:
        reads, writes = [r for r, _ in window], [w for _, w in window]
        print(f"the disk during the save ({len(window)} one-second samples, /proc/diskstats): read "
              f"{min(reads):.2f}-{max(reads):.2f} GB/s (mean {sum(reads)/len(reads):.2f}), written "
              f"{min(writes):.2f}-{max(writes):.2f} GB/s (mean {sum(writes)/len(writes):.2f}), "
              f"together {sum(reads)/len(reads) + sum(writes)/len(writes):.2f} GB/s")
PY
