#!/bin/bash
# Layout-invariance harness: trains the same run twice, in one process and under a parallel
# layout, and checks that the layout changes nothing but rounding: per-iteration losses and
# gradient norms, and every final weight (tessera-compare; tolerances in docs/distributed.md).
#
#   scripts/invariance.sh --np N --layout "FLAGS" [--dtype fp32|bf16|fp16] [--bin DIR] [--work DIR]
#                         [--reference "FLAGS"] -- TRAINING FLAGS...
#
#   --np N          ranks of the parallel run (mpirun --oversubscribe -np N)
#   --layout FLAGS  the parallel flags, e.g. "--tensor-model-parallel-size 2 --sequence-parallel"
#   --dtype         the tolerances to apply: fp32 (default), bf16 or fp16 (pass --bf16 or --fp16
#                   yourself). They are measured for the ctest runs (lr 1e-3 decaying over 8
#                   iterations; bf16 and fp16 with --adam-eps 1e-4): see docs/distributed.md
#   --reference FLAGS
#                   flags for the single-process run only (a negative control: --lr 1e-3 here and
#                   --lr 1.02e-3 in --layout, the training flags without --lr)
#   --bin DIR       where tessera-train and tessera-compare are (default: build/bin)
#   --work DIR      where metrics and weights go (default: a temporary directory, removed)
#   --saved-by N "FLAGS" --save-at K
#                   resharding: the parallel run is made of two jobs, the first under -np N FLAGS
#                   until iteration K (--exit-interval K --save), the second under --np/--layout
#                   from that checkpoint (--load) to the end; their metrics together are compared
# Example:
#   scripts/invariance.sh --np 2 --layout "--tensor-model-parallel-size 2" -- \
#       --model gpt2-tiny --mock-data --lr 1e-3 --adam-eps 1e-6 --train-iters 8 \
#       --micro-batch-size 2 --global-batch-size 4
# Exit status: 0 invariant, 1 a difference beyond tolerance, 2 bad usage or a failed run.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$ROOT/build/bin"
WORK=""
NP=""
LAYOUT=""
REFERENCE=""
DTYPE=fp32
SAVE_NP=""
SAVE_LAYOUT=""
SAVE_AT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --np) NP="$2"; shift 2 ;;
    --layout) LAYOUT="$2"; shift 2 ;;
    --reference) REFERENCE="$2"; shift 2 ;;
    --dtype) DTYPE="$2"; shift 2 ;;
    --bin) BIN="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --saved-by) SAVE_NP="$2"; SAVE_LAYOUT="$3"; shift 3 ;;
    --save-at) SAVE_AT="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "invariance.sh: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [ -z "$NP" ] || [ $# -eq 0 ]; then
  echo "invariance.sh: --np N and training flags after -- are required" >&2
  exit 2
fi
case "$DTYPE" in
  # fp32: layouts change only the order of sums (a few ulps); see docs/distributed.md.
  fp32) TOL=(--loss-rtol 1e-5 --grad-norm-rtol 1e-5 --weight-rtol 1e-5 --weight-atol 1e-6) ;;
  # bf16 and fp16: a layout's other sum order moves a 16-bit rounded value by an ulp now and then
  # (2^-8 relative in bf16, 2^-11 in fp16). Each bound is about 3x the largest difference measured
  # over every bf16 (fp16) invariance test on all four CPU targets (the bf16 per-weight bound 2x:
  # a weight moves at most 4.5e-3 in these runs, the sum of the learning rates, and 2e-3
  # typically). --weight-mean-atol bounds every tensor's mean |difference|. Figures, method and
  # the negative control (invariance.negative-control.bf16): docs/distributed.md.
  bf16) TOL=(--loss-rtol 1.5e-4 --grad-norm-rtol 5e-3 --weight-rtol 1e-3 --weight-atol 1e-3
             --weight-mean-atol 4e-5) ;;
  fp16) TOL=(--loss-rtol 1e-5 --grad-norm-rtol 3e-4 --weight-rtol 2e-4 --weight-atol 2e-4
             --weight-mean-atol 5e-6) ;;
  *) echo "invariance.sh: --dtype must be fp32, bf16 or fp16, got '$DTYPE'" >&2; exit 2 ;;
esac
if [ -n "$SAVE_NP" ] && [ -z "$SAVE_AT" ]; then
  echo "invariance.sh: --saved-by needs --save-at K" >&2
  exit 2
fi
if [ -z "$WORK" ]; then
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/tessera-invariance.XXXXXX")"
  trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

train() {  # train NAME NP [extra flags...]: one run into $WORK/NAME
  local name="$1" np="$2"
  shift 2
  mkdir -p "$WORK/$name"
  if ! timeout 600 mpirun --oversubscribe -np "$np" "$BIN/tessera-train" "$@" \
      --metrics-file "$WORK/$name/metrics.jsonl" --export-weights "$WORK/$name/model.safetensors" \
      >"$WORK/$name/stdout" 2>"$WORK/$name/stderr"; then
    echo "invariance.sh: the $name run failed:" >&2
    tail -n 5 "$WORK/$name/stderr" >&2
    exit 2
  fi
}

# shellcheck disable=SC2086  # REFERENCE and LAYOUT are lists of flags
train reference 1 "$@" $REFERENCE
METRICS="$WORK/layout/metrics.jsonl"
if [ -n "$SAVE_NP" ]; then
  # shellcheck disable=SC2086
  train saved "$SAVE_NP" "$@" $SAVE_LAYOUT --exit-interval "$SAVE_AT" --save "$WORK/checkpoint"
  # shellcheck disable=SC2086
  train layout "$NP" "$@" $LAYOUT --load "$WORK/checkpoint"
  grep -h "loaded" "$WORK/layout/stdout"
  METRICS="$WORK/both.jsonl"
  cat "$WORK/saved/metrics.jsonl" "$WORK/layout/metrics.jsonl" >"$METRICS"
  echo "saved by: -np $SAVE_NP $SAVE_LAYOUT at iteration $SAVE_AT"
else
  # shellcheck disable=SC2086
  train layout "$NP" "$@" $LAYOUT
fi
echo "layout: -np $NP $LAYOUT ($DTYPE tolerances)"
"$BIN/tessera-compare" --reference-metrics "$WORK/reference/metrics.jsonl" \
  --metrics "$METRICS" --reference-weights "$WORK/reference/model.safetensors" \
  --weights "$WORK/layout/model.safetensors" "${TOL[@]}"
status=$?
if [ "$status" -eq 1 ] && [ -z "$SAVE_NP" ]; then
  # Where the layout parted: both runs again with --dump-numerics, and the first record that
  # differs beyond the dtype's tolerance for one layer's figures (docs/observability.md):
  # fp32 the harness's own 1e-5; bf16 2e-2, the least a clean TP 2 x PP 2 x SP layout passed
  # (5e-3 did not: a layout's other sum order moves bf16 values by an ulp); fp16 5e-3 (the same
  # layout passed at 1e-3; fp16 has three more mantissa bits).
  echo "invariance.sh: the layout parted from the reference; where (tessera-compare --localize):"
  # shellcheck disable=SC2086
  train reference-numerics 1 "$@" $REFERENCE --dump-numerics "$WORK/reference-numerics/dump"
  # shellcheck disable=SC2086
  train layout-numerics "$NP" "$@" $LAYOUT --dump-numerics "$WORK/layout-numerics/dump"
  "$BIN/tessera-compare" --localize "$WORK/layout-numerics/dump" \
    "$WORK/reference-numerics/dump" --localize-rtol "$(case "$DTYPE" in fp32) echo 1e-5 ;; bf16) echo 2e-2 ;; *) echo 5e-3 ;; esac)"
fi
exit "$status"
