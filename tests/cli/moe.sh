#!/bin/bash
# Command-line test of Mixture-of-Experts training (docs/moe.md):
#  - the log line and the metrics file carry the router statistics (aux loss, z-loss, dropped
#    fraction; per layer with --moe-per-layer-logging), the aux loss stays out of the lm loss,
#    and a capacity factor drops tokens (dropped fraction > 0) where the dropless run drops none;
#  - exact resume of the DeepSeek-style preset, whose expert biases move every step and travel
#    in the checkpoint: 10 iterations straight equal 5 + save + load + 5, bitwise, in one process
#    and under PP 2 x DP 2 (ZeRO 1);
#  - the model line counts the active parameters.
# Usage: moe.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: moe.sh BUILD_BIN_DIR}"
BIN="$BIN_DIR/tessera-train"
source "$(dirname "$0")/lib.bash" moe-test
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$BIN" ] || { echo "FAIL: $BIN not found" >&2; exit 1; }

FLAGS=(--mock-data --lr 1e-3 --global-batch-size 4 --eval-interval 0 --log-interval 5
       --num-threads 1)

# key FILE NAME: the last value of a top-level number in a metrics file.
key() { tail -1 "$1" | sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p"; }

check "mixtral-tiny with a capacity factor and per-layer logging" \
  run 1 "${FLAGS[@]}" --model mixtral-tiny --train-iters 10 --moe-expert-capacity-factor 1.0 \
  --micro-batch-size 2 \
  --moe-z-loss-coeff 1e-3 --moe-per-layer-logging --metrics-file "$TMP/cap.jsonl"
check "  the log line has the router figures" grep -q "moe aux loss: .* | moe z loss: .* | moe dropped: " "$TMP/out"
check "  and a line per MoE layer" test "$(grep -c '^   moe layer ' "$TMP/out")" -eq 4
check "  tokens are dropped (fraction > 0)" \
  awk -v f="$(key "$TMP/cap.jsonl" moe_dropped_fraction)" 'BEGIN { exit !(f > 0 && f < 1) }'
check "  the aux loss (over its coefficient) is near 1, its uniform-routing value" \
  awk -v a="$(key "$TMP/cap.jsonl" moe_aux_loss)" 'BEGIN { exit !(a >= 1 && a < 1.5) }'
check "  both layers in the metrics file" grep -q '"moe_layers":\[{"layer":0,.*{"layer":1,' "$TMP/cap.jsonl"
check "  the model line counts active parameters" grep -q "active per token" "$TMP/out"
check "mixtral-tiny dropless" run 1 "${FLAGS[@]}" --model mixtral-tiny --train-iters 5 --micro-batch-size 2 \
  --metrics-file "$TMP/dropless.jsonl"
check "  drops nothing" test "$(key "$TMP/dropless.jsonl" moe_dropped_fraction)" = "0.0"

# The run's numbers without the timings.
numbers() {
  sed -E 's/"(iter_time_s|tokens_per_s|tflops_per_rank|peak_mem_bytes|data_wait_s|gemm_s)":[^,}]*,?//g' "$@"
}
# resume NAME NP LAYOUT...: 10 straight equal 5 + save / load + 5, bitwise.
resume() {
  local name="$1" np="$2"
  shift 2
  run "$np" "${FLAGS[@]}" --model moe-tiny --train-iters 10 "$@" \
    --metrics-file "$TMP/$name.straight.jsonl" || return 1
  run "$np" "${FLAGS[@]}" --model moe-tiny --train-iters 10 "$@" --exit-interval 5 \
    --save "$TMP/$name.ckpt" --metrics-file "$TMP/$name.first.jsonl" || return 1
  grep -q '"moe_expert_bias"' "$TMP/$name.ckpt/iter_0000005/metadata.json" || return 1
  run "$np" "${FLAGS[@]}" --model moe-tiny --train-iters 10 "$@" --load "$TMP/$name.ckpt" \
    --metrics-file "$TMP/$name.second.jsonl" || return 1
  cat "$TMP/$name.first.jsonl" "$TMP/$name.second.jsonl" >"$TMP/$name.resumed.jsonl"
  diff <(numbers "$TMP/$name.straight.jsonl") <(numbers "$TMP/$name.resumed.jsonl") >&2
}
check "moe-tiny (moving expert biases): exact resume in one process" resume np1 1 --micro-batch-size 2
check "moe-tiny: exact resume under PP 2 x DP 2, ZeRO 1" resume pp2dp2 4 \
  --pipeline-model-parallel-size 2 --zero-stage 1 --num-layers 4 --micro-batch-size 1
# Without the biases in the checkpoint the resumed run would route differently: the test above
# can fail. Shown by resuming with the biases removed from the run state.
sed -i 's/"moe_expert_bias"/"moe_expert_bias_removed"/' "$TMP/np1.ckpt/iter_0000005/metadata.json"
negative_control() {
  run 1 "${FLAGS[@]}" --micro-batch-size 2 --model moe-tiny --train-iters 10 --load "$TMP/np1.ckpt" \
    --metrics-file "$TMP/nobias.jsonl" || return 1
  ! diff -q <(cut -d, -f1-3 "$TMP/np1.second.jsonl") <(cut -d, -f1-3 "$TMP/nobias.jsonl") >/dev/null
}
check "  (negative control: without the saved biases the resumed run differs)" negative_control

echo "moe: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
