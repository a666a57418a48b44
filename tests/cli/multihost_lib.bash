# Shared by the multi-host tests (tests/cli/multihost.sh, tests/cli/slurm.sh; sourced after
# lib.bash, not a test itself): the training run they compare, how a run is logged, and the
# bitwise comparison of two runs. Needs BIN_DIR and TMP.

FLAGS=(--model gpt2-tiny --mock-data --lr 1e-3 --min-lr 1e-4 --lr-decay-iters 20 --train-iters 20
       --micro-batch-size 1 --global-batch-size 8 --eval-interval 0 --bf16 --log-interval 5)
# The bitwise comparisons pin one thread a rank: the default follows the ranks per host, which
# differ between the layouts compared, and a GEMM library's sums may follow the thread count.
PIN=(--num-threads 1)
TP_DP=(--tensor-model-parallel-size 2)

# outputs NAME: sets OUTPUTS to the flags that write run NAME's metrics and weights.
outputs() {
  mkdir -p "$TMP/$1"
  OUTPUTS=(--metrics-file "$TMP/$1/metrics.jsonl" --export-weights "$TMP/$1/weights.safetensors")
}

# logged NAME COMMAND...: runs COMMAND (at most 300 s), its stdout and stderr in $TMP/NAME.
logged() {
  local name="$1"
  shift
  mkdir -p "$TMP/$name"
  timeout 300 "$@" >"$TMP/$name/out" 2>"$TMP/$name/err"
}

# bitwise A B: A's and B's losses and gradient norms equal at every iteration, weights identical.
bitwise() {
  "$BIN_DIR/tessera-compare" --reference-metrics "$TMP/$1/metrics.jsonl" \
    --metrics "$TMP/$2/metrics.jsonl" --loss-rtol 0 --grad-norm-rtol 0 \
    --reference-weights "$TMP/$1/weights.safetensors" --weights "$TMP/$2/weights.safetensors" \
    --weight-rtol 1e-30 --weight-atol 0 >"$TMP/compare" 2>&1 &&
    [ "$(grep -c '"iteration"' "$TMP/$2/metrics.jsonl")" -eq 20 ] &&
    cmp -s "$TMP/$1/weights.safetensors" "$TMP/$2/weights.safetensors" || {
    sed 's/^/    /' "$TMP/compare" "$TMP/$2/err" | tail -n 8 >&2
    return 1
  }
}

# no_namespace_left: none of the namespaces listed in $TMP/made (one a line) exists now.
no_namespace_left() { ! ip netns list | awk '{print $1}' | grep -qxF -f "$TMP/made"; }
