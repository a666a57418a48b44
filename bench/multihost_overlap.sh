#!/bin/bash
# Data parallelism across two "hosts" (network namespaces, scripts/multihost.sh) over a link
# shaped with tc to RATE: what overlapping the gradient reduction with backward hides, and the
# arithmetic that predicts the step from its parts, each figure beside its reference measured in
# the same run (docs/distributed.md, "Running on several machines").
#
#   bash bench/multihost_overlap.sh [BUILD_BIN_DIR] [RATE...]     (default rates: 1gbit 200mbit)
#
# For each rate:
#   1. all_reduce bus bandwidth between the hosts through ProcessGroup and plain MPI
#      (build/bin/comm, 40 MiB: the gradient buckets' size), 2 hosts x 1 rank;
#   2. build/bin/dp_overlap, GPT-2 124M fp32 (498 MB of gradients), micro-batch 4 x 256, DP 2 on
#      2 hosts x 1 rank, 1 thread a rank: the step with the reduction overlapped and after
#      backward, alternated; the compute alone is the same step at DP 1 on one host;
#   3. the arithmetic: the reduction's time after backward against gradient bytes / the all_reduce
#      bus bandwidth of 1. (2 ranks: the bus bytes are the buffer's); the step after backward
#      against compute + that; the same with the all-reduce's rate back to back and with the
#      link's rate (bench/mpi_exchange); the hidden share = 1 - (the reduction left after
#      backward when overlapped) / (the reduction after backward); the overlapped step against
#      compute + (1 - the hidden share) x the gradient bytes at the link's rate, the compute being
#      DP 1's and the DP 2 step's own (its forward and backward with the reduction after them);
#      and what overlapping saved of the step, as a share of the reduction after backward.
# And, at the first rate, ZeRO 3's prefetched gathers: tessera-train gpt2-124m, DP 2, ZeRO 3,
# 3 iterations, with the default --stage3-prefetch-bucket-size and with 0 (no prefetch), and the
# share of the gathers' time at the link's rate that prefetching saved.
# MICRO_BATCH=B sets the micro-batch (default 4).
# Needs root with CAP_SYS_ADMIN (the namespaces). Takes ~10 minutes per rate on 2 cores.
set -eu
BIN="${1:-build/bin}"
shift || true
RATES=("$@")
[ ${#RATES[@]} -gt 0 ] || RATES=(1gbit 200mbit)
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MULTIHOST="$ROOT/scripts/multihost.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
STEPS="${STEPS:-2}"
# The micro-batch (x 256 tokens): backward's length against the reduction's. At 1 Gbit/s the
# reduction of GPT-2 124M's gradients takes ~4.2 s, backward ~2.4 s at B 4 and ~4.8 s at B 8 (one
# core a rank): only with backward at least as long can most of it be hidden.
B="${MICRO_BATCH:-4}"

echo "== compute alone: dp_overlap at DP 1, one host"
compute_line=$(mpirun -np 1 "$BIN/dp_overlap" --steps "$STEPS" --micro-batch-size $B | tail -1)
echo "$compute_line"
compute_ms=$(echo "$compute_line" | sed -E 's/.*after backward ([0-9.]+) ms.*/\1/')

first=1
for rate in "${RATES[@]}"; do
  echo
  echo "== link shaped to $rate (tc tbf on each host's veth, both directions)"
  bw_line=$(bash "$MULTIHOST" --hosts 2 --slots 1 --rate "$rate" -- "$BIN/comm" \
    --min-bytes 41943040 --max-bytes 41943040 --rounds 3 --op all_reduce | tail -1)
  echo "comm bench (op size MPI-us MPI-GB/s PG-us PG-GB/s ratio): $bw_line"
  # Bus bandwidth of the ProcessGroup path from its time per call (more digits than its GB/s
  # column): 40 MiB of bus bytes (2 ranks: the buffer's size).
  bus_gbs=$(echo "$bw_line" | awk '{printf "%.6f", 41943040 / ($6 * 1e3)}')
  # The same all-reduce as the gradient buckets issue it, back to back (no barrier between calls),
  # and the link's rate each way (one message, and chunks, each way at once): bench/mpi_exchange.
  ex=$(bash "$MULTIHOST" --hosts 2 --slots 1 --rate "$rate" -- "$BIN/mpi_exchange" \
    --bytes 20971520 --rounds 5 | tail -4)
  echo "$ex"
  b2b_mbs=$(echo "$ex" | sed -nE 's/^all_reduce back to back.*\(([0-9.]+) MB\/s each way\).*/\1/p')
  link_mbs=$(echo "$ex" | sed -nE 's/^chunked.*\(([0-9.]+) MB\/s each way\).*/\1/p')
  out=$(bash "$MULTIHOST" --hosts 2 --slots 1 --rate "$rate" -- "$BIN/dp_overlap" \
    --steps "$STEPS" --micro-batch-size $B | tail -3)
  echo "$out"
  grad_mb=$(echo "$out" | sed -nE 's/gradients reduced per step: ([0-9.]+) MB.*/\1/p')
  exposed_on=$(echo "$out" | sed -nE 's/^reduction after backward returned: overlapped ([0-9.]+) ms.*/\1/p')
  exposed_off=$(echo "$out" | sed -nE 's/^reduction after backward returned: .*after backward ([0-9.]+) ms.*/\1/p')
  on_ms=$(echo "$out" | sed -nE 's/^forward\+backward\+reduction: overlapped ([0-9.]+) ms.*/\1/p')
  off_ms=$(echo "$out" | sed -nE 's/^forward\+backward\+reduction: .*after backward ([0-9.]+) ms.*/\1/p')
  /usr/bin/python3 - "$compute_ms" "$on_ms" "$off_ms" "$exposed_on" "$exposed_off" "$grad_mb" \
    "$bus_gbs" "$b2b_mbs" "$link_mbs" <<'PY'
import sys
compute, on, off, exp_on, exp_off, grad_mb, bus, b2b, link = (float(x) for x in sys.argv[1:])
comm_rate = grad_mb / bus  # ms: MB / (GB/s)
fb_off = off - exp_off  # forward + backward of the DP 2 step, reduction after it
print(f"arithmetic: the reduction alone (after backward) took {exp_off:.0f} ms; at the all_reduce "
      f"bus bandwidth of the comm bench, {grad_mb:.0f} MB / {bus:.3f} GB/s = {comm_rate:.0f} ms "
      f"({100 * (exp_off / comm_rate - 1):+.1f}%)")
predicted = compute + comm_rate
print(f"  step after backward: predicted compute (DP 1) + communication = {compute:.0f} + "
      f"{comm_rate:.0f} = {predicted:.0f} ms; measured {off:.0f} ms ({100 * (off / predicted - 1):+.1f}%)")
# Two ranks: an all-reduce moves the buffer's bytes each way, so MB / (MB/s each way) = seconds.
for name, rate in (("back to back (mpi_exchange)", b2b), ("the link's rate each way", link)):
    comm = grad_mb / rate * 1e3
    print(f"  with the all-reduce {name}, {rate:.1f} MB/s: the reduction {exp_off:.0f} ms against "
          f"{comm:.0f} ({100 * (exp_off / comm - 1):+.1f}%); the step {off:.0f} ms against "
          f"{compute:.0f} + {comm:.0f} = {compute + comm:.0f} ({100 * (off / (compute + comm) - 1):+.1f}%)")
print(f"  overlapped: {exp_on:.0f} ms of the reduction left after backward: hidden "
      f"1 - {exp_on:.0f} / {exp_off:.0f} = {100 * (1 - exp_on / exp_off):.1f}%; the step "
      f"{on:.0f} ms against {off:.0f} ms after backward ({100 * (1 - on / off):.1f}% shorter); "
      f"forward + backward {fb_off:.0f} ms (DP 1: {compute:.0f})")
# What overlapping saves of the step, against the reduction's own time: on ranks whose cores
# also carry the transfer (here the hosts' network stacks share the 2 cores), hidden traffic
# still slows the compute it hides behind, which the exposure above does not show.
print(f"  the step saved by overlapping: ({off:.0f} - {on:.0f}) / {exp_off:.0f} = "
      f"{100 * (off - on) / exp_off:.1f}% of the reduction")
# Overlapped, the step is the compute plus what backward did not hide of the communication at the
# link's rate: compute + (1 - hidden share) x gradient bytes / link rate.
link_comm = grad_mb / link * 1e3
hidden_share = (1 - exp_on / exp_off) if exp_off > 0 else 0.0
predicted_on = compute + (1 - hidden_share) * link_comm
print(f"  overlapped step: predicted compute + (1 - hidden) x the reduction at the link's rate = "
      f"{compute:.0f} + {1 - hidden_share:.3f} x {link_comm:.0f} = {predicted_on:.0f} ms; measured {on:.0f} ms "
      f"({100 * (on / predicted_on - 1):+.1f}%)")
# The same with the DP 2 step's own compute: its forward and backward with the reduction after
# them (nothing overlaps), measured in this run. DP 1 computes alone on the machine, so its one
# rank has the caches, memory bandwidth and clock of an otherwise idle machine; the DP 2 ranks
# compute side by side, as each host's ranks would.
predicted_own = fb_off + (1 - hidden_share) * link_comm
print(f"  with the DP 2 step's own compute: {fb_off:.0f} + {1 - hidden_share:.3f} x {link_comm:.0f} = "
      f"{predicted_own:.0f} ms; measured {on:.0f} ms ({100 * (on / predicted_own - 1):+.1f}%)")
PY
  if [ "$first" -eq 1 ]; then
    first=0
    echo "-- ZeRO 3 (tessera-train gpt2-124m fp32, DP 2, B $B x 256, 3 iterations): prefetched gathers"
    declare -A iteration_ms
    for prefetch in 50000000 0; do
      line=$(bash "$MULTIHOST" --hosts 2 --slots 1 --rate "$rate" -- "$BIN/tessera-train" \
        --model gpt2-124m --mock-data --lr 1e-4 --train-iters 3 --micro-batch-size $B \
        --global-batch-size $((2 * B)) --seq-length 256 --eval-interval 0 --log-interval 1 \
        --num-threads 1 --zero-stage 3 --stage3-prefetch-bucket-size "$prefetch" |
        grep "iteration        3/" | sed -E 's/.*elapsed time per iteration \(ms\): ([0-9.]+).*/\1/')
      echo "stage3_prefetch_bucket_size $prefetch: iteration 3 took $line ms"
      iteration_ms[$prefetch]=$line
    done
    # Each rank gathers the other's half of the fp32 parameters before forward and again before
    # backward: the gradients' bytes each way an iteration. Without prefetching every gather waits
    # in front of its layer; what prefetching saves is the part it hid behind computation.
    /usr/bin/python3 - "${iteration_ms[50000000]}" "${iteration_ms[0]}" "$grad_mb" "$link_mbs" <<'PY'
import sys
on, off, grad_mb, link = (float(x) for x in sys.argv[1:])
gathers = grad_mb / link * 1e3
print(f"  ZeRO 3's gathers: {grad_mb:.0f} MB each way an iteration, {gathers:.0f} ms at the link's "
      f"rate; prefetching saved {off:.0f} - {on:.0f} = {off - on:.0f} ms: "
      f"{100 * (off - on) / gathers:.1f}% of the gathers hidden")
PY
  fi
done
