#!/bin/bash
# --exit-signal-handler (Megatron's): a SIGTERM to any rank (as SLURM or Kubernetes deliver it to
# every task) makes every rank finish the iteration, save a checkpoint of it and exit 0; resuming
# from that checkpoint continues bitwise as if never stopped. A SIGTERM to mpirun itself reaches
# the ranks too (Open MPI forwards it) and the checkpoint is written, though mpirun's own exit
# status is then Open MPI's 1. Without --save the flag is one error line.
# Usage: exit_signal.sh BUILD_BIN_DIR
BIN="${1:?usage: exit_signal.sh BUILD_BIN_DIR}/tessera-train"
source "$(dirname "$0")/lib.bash" exit-signal
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FLAGS=(--model gpt2-tiny --mock-data --lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 5
       --train-iters 5000 --micro-batch-size 1 --global-batch-size 4 --eval-iters 0
       --log-interval 1000 --num-threads 1 --zero-stage 1)

numbers() {  # the metrics without the timings
  sed -E 's/"(iter_time_s|tokens_per_s|tflops_per_rank|peak_mem_bytes|data_wait_s|gemm_s)":[^,}]*,?//g' "$@"
}

# interrupted NAME TARGET(ranks|launcher): starts 2 ranks, sends SIGTERM once 30 iterations are
# logged, waits; leaves the exit status in $TMP/NAME.status.
interrupted() {
  local name="$1"
  timeout 120 mpirun --oversubscribe -np 2 "$BIN" "${FLAGS[@]}" --exit-signal-handler \
    --save "$TMP/$name.ckpt" --metrics-file "$TMP/$name.jsonl" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  local pid=$! i
  for i in $(seq 600); do
    [ "$(cat "$TMP/$name.jsonl" 2>/dev/null | wc -l)" -ge 30 ] && break
    sleep 0.1
  done
  local launcher
  launcher=$(pgrep -P "$pid" -x mpirun)  # $pid is timeout's
  if [ "$2" = ranks ]; then pkill -TERM -P "$launcher"; else kill -TERM "$launcher"; fi
  wait "$pid"
  echo $? >"$TMP/$name.status"
}

interrupted ranks ranks
n=$(cat "$TMP/ranks.ckpt/latest_checkpointed_iteration.txt" 2>/dev/null)
check "SIGTERM to the ranks: exit 0" [ "$(cat "$TMP/ranks.status")" = 0 ]
check "SIGTERM to the ranks: a checkpoint at the iteration the run stopped after" \
  grep -q "^> exiting after iteration $n (SIGTERM, --exit-signal-handler)" "$TMP/ranks.out"
check "SIGTERM to the ranks: stopped mid-run" [ "${n:-0}" -ge 30 ] && [ "${n:-0}" -lt 5000 ]
check "SIGTERM to the ranks: every iteration logged" [ "$(wc -l <"$TMP/ranks.jsonl")" -eq "${n:-0}" ]

# Resume to n + 10 against a run that never stopped (the same schedule: --train-iters 5000,
# stopped by --exit-interval).
stop=$(( ${n:-0} + 10 ))
run 2 "${FLAGS[@]}" --exit-interval "$stop" --metrics-file "$TMP/straight.jsonl"
check "straight run: exit 0" [ $? -eq 0 ]
run 2 "${FLAGS[@]}" --exit-interval "$stop" --load "$TMP/ranks.ckpt" \
  --metrics-file "$TMP/resumed.jsonl"
check "resumed run: exit 0" [ $? -eq 0 ]
cat "$TMP/ranks.jsonl" "$TMP/resumed.jsonl" >"$TMP/joined.jsonl"
check "resumed after SIGTERM: bitwise the run that never stopped" \
  diff <(numbers "$TMP/straight.jsonl") <(numbers "$TMP/joined.jsonl")

interrupted launcher launcher
m=$(cat "$TMP/launcher.ckpt/latest_checkpointed_iteration.txt" 2>/dev/null)
check "SIGTERM to mpirun: a checkpoint at the iteration the run stopped after" \
  grep -q "^> exiting after iteration $m (SIGTERM, --exit-signal-handler)" "$TMP/launcher.out"

FLAGS+=(--exit-signal-handler)
check "--exit-signal-handler without --save: one line, exit 2" \
  expect_error 2 "--exit-signal-handler saves a checkpoint on SIGTERM: it needs --save DIR"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
