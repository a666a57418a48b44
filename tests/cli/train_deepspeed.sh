#!/bin/bash
# tessera-train --deepspeed --deepspeed_config: a config that contradicts a flag, holds a bad
# value, an unknown key or a refused one is one error line and exit code 2 on every rank (no
# hang); no-effect keys are one warning each; examples/ds_zero1.json trains under DP 2 with its
# schedule; examples/ds_hf_trainer_auto.json (a Hugging Face Trainer config, "auto" values) trains
# with the values resolved from the flags; the legacy "bfloat16" key trains in bf16.
# Usage: train_deepspeed.sh BUILD_BIN_DIR
set -u
BIN="${1:?usage: train_deepspeed.sh BUILD_BIN_DIR}/tessera-train"
EXAMPLES="$(cd "$(dirname "$0")/../.." && pwd)/examples"
EXAMPLE="$EXAMPLES/ds_zero1.json"
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
refused "parameter offload below ZeRO stage 3 is refused (offload.sh tests the rest)" \
  ".*zero_optimization.offload_param (--offload-param-nvme-path) needs ZeRO stage 3: the run is at stage 1" \
  '{"zero_optimization": {"stage": 1, "offload_param": {"device": "nvme", "nvme_path": "/tmp"}}}'
refused "contiguous_gradients false is refused" \
  ".*zero_optimization.contiguous_gradients false is not supported" \
  '{"zero_optimization": {"stage": 2, "contiguous_gradients": false}}'
refused "an all-gather bucket unlike the reduce bucket is refused (stages 1-2)" \
  ".*zero_optimization.allgather_bucket_size 200000000 differs from the reduce bucket size 500000000" \
  '{"zero_optimization": {"stage": 1, "reduce_bucket_size": 5e8, "allgather_bucket_size": 2e8}}'

refused "an unknown key is an error naming it" \
  ".*unknown key 'flops_profilerr'" '{"train_batch_size": 4, "flops_profilerr": {}}'
refused "an \"auto\" Tessera cannot resolve is an error naming the key" \
  ".*zero_optimization.stage is \"auto\", which Tessera cannot resolve" \
  '{"zero_optimization": {"stage": "auto"}}'

trains() {
  echo '{"train_batch_size": 4, "flops_profiler": {"enabled": false}}' >"$TMP/noeffect.json"
  run 2 "${FLAGS[@]}" --deepspeed_config "$TMP/noeffect.json" --lr 1e-3 || return 1
  [ "$(grep -c "^warning: .*flops_profiler has no effect on this backend" "$TMP/err")" -eq 1 ] ||
    return 1
  run 2 "${FLAGS[@]}" --deepspeed_config "$EXAMPLE" || return 1
  grep -q 'ZeRO stage 1' "$TMP/out" && grep -q '^ iteration        2/       2' "$TMP/out"
}
check "a no-effect key warns once; the example config trains" trains

# metric ITERATION KEY: that iteration's KEY from the metrics file.
metric() {
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["iteration"] == int(sys.argv[2]): print(r[sys.argv[3]])' "$TMP/m.jsonl" "$1" "$2"
}
RUN=(--model gpt2-tiny --mock-data --eval-iters 0 --num-threads 1 --deepspeed
     --metrics-file "$TMP/m.jsonl")

# Hugging Face's Trainer fills "auto" from its arguments; here they come from the flags: micro 2,
# global 8 (accumulation 2 at DP 2), lr 2e-3, warmup 1 (DeepSpeed raises it to 2), 3 iterations,
# bf16, ZeRO 3 buckets from hidden 64. WarmupDecayLR's log warmup: updates 0 and 1 run at
# iteration 0's lr 0, update 2 at iteration 1's: 2e-3 x ln 2 / ln 2 = 2e-3.
hf_auto() {
  run 2 "${RUN[@]}" --deepspeed_config "$EXAMPLES/ds_hf_trainer_auto.json" --train-iters 3 \
    --micro-batch-size 2 --global-batch-size 8 --lr 2e-3 --lr-warmup-iters 1 --bf16 || return 1
  grep -q '^> deepspeed config: optimizer.params.lr "auto" = 0.002 (--lr)$' "$TMP/out" &&
    grep -q '^> deepspeed config: gradient_accumulation_steps "auto" = 2 ' "$TMP/out" &&
    grep -q '^> deepspeed config: zero_optimization.reduce_bucket_size "auto" = 4096 ' "$TMP/out" &&
    grep -q 'ZeRO stage 3' "$TMP/out" && grep -q '^ iteration        3/       3' "$TMP/out" &&
    [ "$(metric 1 lr)" = "0.0" ] && [ "$(metric 3 lr)" = "0.002" ] &&
    [ "$(metric 3 precision)" = "bf16" ]
}
check "a Hugging Face Trainer config with \"auto\" values trains with the flags' values" hf_auto

# The legacy "bfloat16" key runs bf16 (it used to run fp32 silently), here with SGD, OneCycle
# (momentum cycling off for SGD, as DeepSpeed's) and activation_checkpointing as full recompute.
# OneCycle, steps 2 + 2: update 0 at cycle_min_lr 1e-3, update 1 at 1e-3 + 9e-3 x (1/4) / (2/4).
legacy_bf16() {
  cat >"$TMP/bfloat16.json" <<'JSON'
{"train_batch_size": 4, "bfloat16": {"enabled": true},
 "optimizer": {"type": "SGD", "params": {"lr": 0.01, "momentum": 0.9}},
 "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.01,
                                              "cycle_first_step_size": 2}},
 "activation_checkpointing": {"partition_activations": true, "number_checkpoints": 1}}
JSON
  run 2 "${RUN[@]}" --deepspeed_config "$TMP/bfloat16.json" --train-iters 2 || return 1
  grep -q 'compute bf16' "$TMP/out" && [ "$(metric 1 precision)" = "bf16" ] &&
    grep -q '^> deepspeed config: activation_checkpointing: --recompute-granularity full --recompute-method uniform --recompute-num-layers 2$' "$TMP/out" &&
    [ "$(grep -c '^warning: .*cycle_momentum true has no effect with SGD' "$TMP/err")" -eq 1 ] &&
    [ "$(grep -c '^warning: .*partition_activations has no effect' "$TMP/err")" -eq 1 ] &&
    [ "$(metric 1 lr)" = "0.001" ] &&
    python3 -c 'import sys; assert abs(float(sys.argv[1]) - 0.0055) < 1e-15' "$(metric 2 lr)"
}
check "the legacy bfloat16 key trains in bf16 (SGD, OneCycle, activation checkpointing)" legacy_bf16

breakdown() {
  echo '{"train_batch_size": 4, "steps_per_print": 1, "wall_clock_breakdown": true}' >"$TMP/wcb.json"
  run 2 "${FLAGS[@]}" --deepspeed_config "$TMP/wcb.json" --lr 1e-3 || return 1
  [ "$(grep -c '^ time (ms) per iteration on rank 0 | forward: [0-9.]* | backward: [0-9.]* |.* optimizer: [0-9.]* |$' "$TMP/out")" -eq 2 ]
}
check "wall_clock_breakdown prints the time per phase at every log line" breakdown

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
