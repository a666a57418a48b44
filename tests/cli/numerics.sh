#!/bin/bash
# --dump-numerics and tessera-compare --localize:
#  - two clean TP 2 runs: no divergence, compared exactly (same layout);
#  - a one-ulp change planted in one layer's backward under TP 2 (--inject-grad-ulp-layer L,
#    TP rank 0, first micro-batch): the diff names that iteration, micro-batch, pass, layer and
#    tensor, for L = 1 and L = 0;
#  - a clean TP 2 run and TP 2 x PP 2 with sequence parallelism against one process: no
#    divergence within the fp32 tolerance;
#  - bad input: one line, exit 2.
# Usage: numerics.sh BUILD_BIN_DIR
BIN="${1:?usage: numerics.sh BUILD_BIN_DIR}/tessera-train"
COMPARE="$1/tessera-compare"
source "$(dirname "$0")/lib.bash" numerics
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FLAGS=(--model gpt2-tiny --num-layers 4 --mock-data --lr 1e-3 --train-iters 2
       --micro-batch-size 1 --global-batch-size 2 --num-threads 1 --eval-interval 0
       --log-interval 10 --make-vocab-size-divisible-by 256)

# localize A B EXIT TEXT: tessera-compare --localize A B exits EXIT and prints TEXT.
localize() {
  "$COMPARE" --localize "$1" "$2" >"$TMP/report" 2>&1
  local code=$?
  [ "$code" -eq "$3" ] && grep -qF -- "$4" "$TMP/report" || {
    echo "  exit $code (expected $3); report:" >&2
    sed 's/^/    /' "$TMP/report" >&2
    return 1
  }
}

run 1 "${FLAGS[@]}" --dump-numerics "$TMP/single"
check "one process: exit 0, overhead reported" grep -q "^> numerics dump: .* spent recording" \
  "$TMP/out"
for name in a b; do run 2 "${FLAGS[@]}" --tensor-model-parallel-size 2 --dump-numerics "$TMP/$name"; done
check "TP 2 twice: no divergence, exactly" \
  localize "$TMP/a" "$TMP/b" 0 "no divergence: 144 records compared exactly (same layout tp2."

for layer in 1 0; do
  run 2 "${FLAGS[@]}" --tensor-model-parallel-size 2 --dump-numerics "$TMP/fault$layer" \
    --inject-grad-ulp-layer "$layer"
  check "TP 2, one ulp planted in layer $layer's backward: named" \
    localize "$TMP/fault$layer" "$TMP/a" 1 \
    "first divergence: iteration 1, micro-batch (first sample 0), backward, layer $layer input-grad"
done

check "TP 2 against one process: no divergence within the fp32 tolerance" \
  localize "$TMP/a" "$TMP/single" 0 "no divergence: 144 records compared within relative"
run 4 "${FLAGS[@]}" --tensor-model-parallel-size 2 --sequence-parallel \
  --pipeline-model-parallel-size 2 --dump-numerics "$TMP/tp2pp2"
check "TP 2 x PP 2 with SP against one process: no divergence" \
  localize "$TMP/tp2pp2" "$TMP/single" 0 "no divergence: 144 records compared within relative"

"$COMPARE" --localize "$TMP/missing" "$TMP/a" >"$TMP/out" 2>"$TMP/err"
check "a missing directory: one line, exit 2" [ $? -eq 2 -a "$(wc -l <"$TMP/err")" -eq 1 ]

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
