#!/bin/bash
# tessera-train under mpirun: --print-mesh prints the layout once and exits 0; sizes that do not
# fit the world give one error line and exit code 2 without hanging; data-parallel batch sizes
# that do not divide and ZeRO stages outside 0-3 are one error line (context-parallel errors:
# train_context_parallel.sh). Usage: train_mesh.sh BUILD_BIN_DIR
set -u
BIN="${1:?usage: train_mesh.sh BUILD_BIN_DIR}/tessera-train"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP="$(mktemp -d "${TMPDIR:-/tmp}/tessera-train-mesh.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $1" >&2; sed 's/^/    /' "$TMP/out" "$TMP/err" >&2; }
FLAGS=(--model gpt2-tiny --mock-data --train-iters 1 --lr 1e-3 --eval-iters 0)
run() { timeout 120 mpirun --oversubscribe -np "$1" "$BIN" "${@:2}" >"$TMP/out" 2>"$TMP/err"; }

run 8 "${FLAGS[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --print-mesh
code=$?
# The Megatron order: TP groups [0,1]..., DP groups [0,2]..., PP groups [0,4]...; printed once.
if [ $code -eq 0 ] && [ "$(grep -c '^world 8 = TP 2 x CP 1 x DP 2 x PP 2' "$TMP/out")" -eq 1 ] &&
   grep -q '^dp  *\[0,2\] \[1,3\] \[4,6\] \[5,7\]$' "$TMP/out" &&
   grep -q '^pp  *\[0,4\] \[1,5\] \[2,6\] \[3,7\]$' "$TMP/out"; then ok; else fail "print-mesh (exit $code)"; fi

run 3 "${FLAGS[@]}" --tensor-model-parallel-size 2
code=$?
if [ $code -eq 2 ] && [ "$(grep -c '^error: world size 3 is not divisible by TP\*CP\*PP = 2' "$TMP/err")" -eq 1 ]; then ok
else fail "indivisible world (exit $code)"; fi

# Expert parallelism: bad combinations are one line and exit 2 on every rank.
# expect_mesh_error NP PATTERN ARGS...
expect_mesh_error() {
  local np="$1" pattern="$2"
  shift 2
  run "$np" "$@"
  local code=$?
  if [ $code -eq 2 ] && [ "$(grep -c "^error: $pattern" "$TMP/err")" -eq 1 ]; then ok
  else fail "$pattern (exit $code)"; sed 's/^/    /' "$TMP/err" >&2; fi
}
MOE=(--mock-data --train-iters 1 --lr 1e-3 --micro-batch-size 1 --global-batch-size 4 --num-threads 1)
expect_mesh_error 2 "--expert-model-parallel-size 2: needs an MoE model (--num-experts)" \
  "${MOE[@]}" --model gpt2-tiny --expert-model-parallel-size 2
expect_mesh_error 4 "--num-experts: 6 is not divisible by --expert-model-parallel-size 4" \
  "${MOE[@]}" --model mixtral-tiny --num-experts 6 --expert-model-parallel-size 4
expect_mesh_error 3 "--expert-model-parallel-size 2 does not divide DP\*CP = 3" "${MOE[@]}" --model mixtral-tiny --expert-model-parallel-size 2
expect_mesh_error 4 "--expert-tensor-parallel-size 4: only the tensor-parallel size (2, experts split like the dense MLP) or 1 (experts whole) is implemented" \
  "${MOE[@]}" --model mixtral-tiny --tensor-model-parallel-size 2 --expert-tensor-parallel-size 4
expect_mesh_error 2 "world size 2 is not divisible by ETP\*EP\*PP = 4" \
  "${MOE[@]}" --model mixtral-tiny --tensor-model-parallel-size 2 --expert-model-parallel-size 4 \
  --expert-tensor-parallel-size 1
expect_mesh_error 2 "--moe-ffn-hidden-size: 175 is not divisible by --tensor-model-parallel-size 2" \
  "${MOE[@]}" --model mixtral-tiny --tensor-model-parallel-size 2 --moe-ffn-hidden-size 175

# Data parallel: the global batch must split into micro-batches of every rank.
run 2 "${FLAGS[@]}" --micro-batch-size 2 --global-batch-size 6
code=$?
if [ $code -eq 2 ] && [ "$(grep -c '^error: --global-batch-size 6 is not divisible by --micro-batch-size 2 x data-parallel size 2' "$TMP/err")" -eq 1 ]; then ok
else fail "global batch not divisible by micro batch x DP (exit $code)"; fi

run 2 "${FLAGS[@]}" --zero-stage 4
code=$?
if [ $code -eq 2 ] && [ "$(grep -c 'zero-stage' "$TMP/err")" -eq 1 ]; then ok
else fail "zero stage 4 refused (exit $code)"; fi

# --exit-duration-in-mins under DP: the ranks agree on the iteration to stop at (their clocks
# differ), so the job ends cleanly and exports.
run 2 --model gpt2-tiny --mock-data --lr 1e-3 --eval-iters 0 --train-iters 100000 \
  --exit-duration-in-mins 0.0001 --zero-stage 1 \
  --export-weights "$TMP/exit/model.safetensors"
code=$?
if [ $code -eq 0 ] && [ "$(grep -c '^> exiting after iteration [0-9]* (--exit-duration-in-mins)' "$TMP/out")" -eq 1 ] &&
   [ -s "$TMP/exit/model.safetensors" ]; then ok
else fail "exit-duration under DP (exit $code)"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
