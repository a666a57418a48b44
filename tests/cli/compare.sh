#!/bin/bash
# Command-line test of tessera-compare (metrics and weights). Usage: compare.sh BUILD_BIN_DIR
# Hand-written metrics files: equal runs pass (exit 0), a difference beyond the tolerance fails
# (exit 1), a NaN (null) loss or norm fails even when the reference has the same NaN, the norm of
# an iteration both runs skipped is not compared, and a val_loss on only one side fails.
# Hand-written weight files: --weight-mean-atol bounds each tensor's mean, not the overall one.
# Exits non-zero if any check fails.
BIN="${1:?usage: compare.sh BUILD_BIN_DIR}/tessera-compare"
source "$(dirname "$0")/lib.bash" compare-test
[ -x "$BIN" ] || { echo "FAIL: $BIN not found or not executable" >&2; exit 1; }

# line ITERATION LOSS NORM [EXTRA]: one metrics line as tessera-train writes it.
line() {
  echo "{\"iteration\": $1, \"lm_loss\": $2, \"grad_norm\": $3, \"loss_scale\": 1.0, \"skipped\": false${4:-}}"
}
# compare_exit REF RUN: tessera-compare's exit code for two metrics files.
compare_exit() {
  "$BIN" --reference-metrics "$1" --metrics "$2" > "$TMP/out" 2> "$TMP/err"
  echo $?
}

{ line 1 2.5 1.25; line 2 2.25 1.5 ', "val_loss": 2.375'; } > "$TMP/ref.jsonl"
cp "$TMP/ref.jsonl" "$TMP/same.jsonl"
check "identical metrics pass" [ "$(compare_exit "$TMP/ref.jsonl" "$TMP/same.jsonl")" -eq 0 ]

{ line 1 2.5 1.25; line 2 2.26 1.5 ', "val_loss": 2.375'; } > "$TMP/off.jsonl"
check "a loss 4e-3 away fails at the default 1e-5" \
  [ "$(compare_exit "$TMP/ref.jsonl" "$TMP/off.jsonl")" -eq 1 ]
check "and the report names iteration 2" grep -q "lm loss:.*iteration 2.*EXCEEDED" "$TMP/out"

{ line 1 2.5 1.25; line 2 null 1.5 ', "val_loss": 2.375'; } > "$TMP/nan.jsonl"
check "a NaN loss against a finite one fails" \
  [ "$(compare_exit "$TMP/ref.jsonl" "$TMP/nan.jsonl")" -eq 1 ]
check "NaN never equals NaN: two runs with the same NaN loss fail" \
  [ "$(compare_exit "$TMP/nan.jsonl" "$TMP/nan.jsonl")" -eq 1 ]
{ line 1 2.5 null; line 2 2.25 1.5 ', "val_loss": 2.375'; } > "$TMP/nannorm.jsonl"
check "two runs with the same NaN norm (not skipped) fail" \
  [ "$(compare_exit "$TMP/nannorm.jsonl" "$TMP/nannorm.jsonl")" -eq 1 ]
{ line 1 2.5 1.25; line 2 2.25 1.5 ', "val_loss": null'; } > "$TMP/nanval.jsonl"
check "two runs with the same NaN val_loss fail" \
  [ "$(compare_exit "$TMP/nanval.jsonl" "$TMP/nanval.jsonl")" -eq 1 ]

# An overflowed iteration: skipped, no norm, the loss scale halved: equal in both runs, passes.
skipped='{"iteration": 1, "lm_loss": 2.5, "grad_norm": null, "loss_scale": 0.5, "skipped": true}'
{ echo "$skipped"; line 2 2.25 1.5; } > "$TMP/skip.jsonl"
check "an iteration both runs skipped (no norm) passes" \
  [ "$(compare_exit "$TMP/skip.jsonl" "$TMP/skip.jsonl")" -eq 0 ]
{ line 1 2.5 1.25; line 2 2.25 1.5; } > "$TMP/noval.jsonl"
check "a val_loss in only one run fails" [ "$(compare_exit "$TMP/ref.jsonl" "$TMP/noval.jsonl")" -eq 1 ]

# weights FILE B: a safetensors file of tensor a (4 x 1.0) and tensor b (1 element: the
# little-endian float32 bytes B, printf escapes).
weights() {
  local header='{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}}'
  {
    printf '%b' "\\x$(printf %02x ${#header})\\0\\0\\0\\0\\0\\0\\0"  # the header's length
    printf '%s' "$header"
    printf '\0\0\x80\x3f%.0s' 1 2 3 4
    printf '%b' "$2"
  } > "$1"
}
weights "$TMP/ref.safetensors" '\0\0\x80\x3f'  # b = 1
weights "$TMP/off.safetensors" '\0\0\x81\x3f'  # b = 1 + 2^-7: b's mean 7.8e-3, the overall 1.6e-3
# weights_exit WEIGHTS FLAGS...: tessera-compare's exit code against ref.safetensors.
weights_exit() {
  "$BIN" --reference-metrics "$TMP/ref.jsonl" --metrics "$TMP/ref.jsonl" \
    --reference-weights "$TMP/ref.safetensors" --weights "$1" "${@:2}" > "$TMP/out" 2> "$TMP/err"
  echo $?
}
check "identical weights pass" [ "$(weights_exit "$TMP/ref.safetensors" --weight-mean-atol 1e-9)" -eq 0 ]
check "a weight within the per-element bound passes without a mean bound" \
  [ "$(weights_exit "$TMP/off.safetensors" --weight-atol 1e-2)" -eq 0 ]
check "and the report gives its absolute difference" \
  grep -q "max absolute difference 7.812e-03 (b\[0\])" "$TMP/out"
check "a tensor's mean beyond --weight-mean-atol fails though the overall mean is within" \
  [ "$(weights_exit "$TMP/off.safetensors" --weight-atol 1e-2 --weight-mean-atol 5e-3)" -eq 1 ]
check "and the report names the tensor" grep -q "worst tensor (b).*EXCEEDED" "$TMP/out"

echo "compare: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
