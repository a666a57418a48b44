#!/bin/bash
# tessera-train --deepspeed --deepspeed_config: a config that contradicts a flag or holds a bad
# value is one error line and exit code 2 on every rank (no hang); unknown keys are one warning
# each; examples/ds_zero1.json trains under DP 2 with its schedule.
# Usage: train_deepspeed.sh BUILD_BIN_DIR
set -u
BIN="${1:?usage: train_deepspeed.sh BUILD_BIN_DIR}/tessera-train"
EXAMPLE="$(cd "$(dirname "$0")/../.." && pwd)/examples/ds_zero1.json"
source "$(dirname "$0")/lib.bash" train-ds
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FLAGS=(--model gpt2-tiny --mock-data --train-iters 2 --eval-iters 0 --num-threads 1 --deepspeed)

echo '{"train_micro_batch_size_per_gpu": 4}' >"$TMP/mbs.json"
check "a key contradicting an explicit flag" expect_error 2 \
  ".*train_micro_batch_size_per_gpu 4 contradicts --micro-batch-size 2" \
  --deepspeed_config "$TMP/mbs.json" --micro-batch-size 2 --lr 1e-3
echo '{"train_batch_size": 6, "train_micro_batch_size_per_gpu": 2}' >"$TMP/batch.json"
check "a batch that does not split over DP" expect_error 2 \
  ".*train_batch_size 6 is not divisible by train_micro_batch_size_per_gpu 2 x data-parallel size 2" \
  --deepspeed_config "$TMP/batch.json" --lr 1e-3
echo '{"zero_optimization": {"stage": 7}}' >"$TMP/stage.json"
check "a ZeRO stage outside 0-3" expect_error 2 ".*zero_optimization.stage must be 0, 1, 2 or 3" \
  --deepspeed_config "$TMP/stage.json" --lr 1e-3
check "a missing file" expect_error 2 ".*cannot open the file" \
  --deepspeed_config "$TMP/missing.json" --lr 1e-3
# Keys Tessera cannot honour are refused, not ignored while the run goes on.
# refused DESCRIPTION PATTERN JSON: that config is one error line matching PATTERN, exit 2.
refused() {
  echo "$3" >"$TMP/refused.json"
  check "$1" expect_error 2 "$2" --deepspeed_config "$TMP/refused.json" --lr 1e-3
}
refused "optimizer offload to the CPU is refused" \
  ".*zero_optimization.offload_optimizer.device \"cpu\": offload is not implemented" \
  '{"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu", "pin_memory": true}}}'
refused "parameter offload to NVMe is refused" \
  ".*zero_optimization.offload_param.device \"nvme\": offload is not implemented" \
  '{"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp"}}}'
refused "contiguous_gradients false is refused" \
  ".*zero_optimization.contiguous_gradients false is not supported" \
  '{"zero_optimization": {"stage": 2, "contiguous_gradients": false}}'
refused "an all-gather bucket unlike the reduce bucket is refused (stages 1-2)" \
  ".*zero_optimization.allgather_bucket_size 200000000 differs from the reduce bucket size 500000000" \
  '{"zero_optimization": {"stage": 1, "reduce_bucket_size": 5e8, "allgather_bucket_size": 2e8}}'

trains() {
  echo '{"train_batch_size": 4, "flops_profiler": {"enabled": false}}' >"$TMP/unknown.json"
  run 2 "${FLAGS[@]}" --deepspeed_config "$TMP/unknown.json" --lr 1e-3 || return 1
  [ "$(grep -c "^warning: .*unknown key 'flops_profiler' ignored" "$TMP/err")" -eq 1 ] || return 1
  run 2 "${FLAGS[@]}" --deepspeed_config "$EXAMPLE" || return 1
  grep -q 'ZeRO stage 1' "$TMP/out" && grep -q '^ iteration        2/       2' "$TMP/out"
}
check "an unknown key warns once; the example config trains" trains

breakdown() {
  echo '{"train_batch_size": 4, "steps_per_print": 1, "wall_clock_breakdown": true}' >"$TMP/wcb.json"
  run 2 "${FLAGS[@]}" --deepspeed_config "$TMP/wcb.json" --lr 1e-3 || return 1
  [ "$(grep -c '^ time (ms) per iteration on rank 0 | forward: [0-9.]* | backward: [0-9.]* |.* optimizer: [0-9.]* |$' "$TMP/out")" -eq 2 ]
}
check "wall_clock_breakdown prints the time per phase at every log line" breakdown

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
