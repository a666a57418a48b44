#!/usr/bin/env bash
# Mixture-of-Experts figures (docs/moe.md):
#  1. speed: build/bin/moe_layer, an 8-expert top-2 MoE block of gpt2-124m's MLP width forward +
#     backward in active GFLOP/s against the dense MLP of the same expert shape, same run, fp32
#     and bf16 (three runs);
#  2. expert parallelism: the same block at EP 2 (mpirun -np 2 moe_layer --ep 2, one thread per
#     rank), with the all-to-all exchange's share of the MoE step; and what each rank holds of
#     the experts at EP 2, EP 2 x EDP 2 (ZeRO 1), EP 4 x EDP 2 (ZeRO 2), TP 2 x EP 2 (expert TP 2),
#     TP 2 x EP 2 with expert TP 1 (ZeRO 1) and EP 2 x EDP 2 at ZeRO 3, against the formula
#     (tessera-train's "> expert parallel:" line, mixtral-tiny, one iteration);
#  3. dropless: a Mixtral-style model (8 SwiGLU experts of 512, top 2, width 512, 4 layers) trained
#     on one rank with its experts' rows as the router chose them and with each padded to its
#     balanced share, interleaved twice (ITERATIONS iterations each, default 8): each run's median
#     step and matrix-product time over iterations 3.. (tessera-train's metrics file) and the
#     process's peak resident set (/usr/bin/time; docs/performance.md, "Products whose token counts vary");
#  4. learning: on the demo's data (scripts/demo-data.sh), the demo's dense LLaMA-style model
#     (examples/demo_llama.json: ffn 352) and its MoE twin of equal active parameters per token
#     (8 experts of ffn 176, top 2, Mixtral's aux loss 0.01), trained for the same tokens with the
#     same schedule; prints both validation losses.
# Usage: bench/moe.sh [BUILD_BIN_DIR] [speed|ep|dropless|learning|all]
#                     [ITERATIONS (learning, default 600; dropless alone, default 8)]
#                     [tessera-train flags for both learning runs, e.g. --hidden-dropout 0.1]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build/bin}"
what="${2:-all}"
iters="${3:-}"
extra=("${@:4}")

if [ "$what" = all ] || [ "$what" = speed ]; then
  for run in 1 2 3; do
    echo "== moe_layer, run $run"
    "$BIN/moe_layer" --threads 2 --steps 7
  done
fi

if [ "$what" = all ] || [ "$what" = ep ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  for run in 1 2 3; do
    echo "== moe_layer at EP 2, run $run"
    mpirun --oversubscribe -np 2 "$BIN/moe_layer" --ep 2 --threads 1 --steps 7
  done
  echo "== what each rank holds of the experts"
  for layout in "2|--expert-model-parallel-size 2" "4|--expert-model-parallel-size 2 --zero-stage 1" \
                "8|--expert-model-parallel-size 4 --zero-stage 2" \
                "4|--tensor-model-parallel-size 2 --expert-model-parallel-size 2" \
                "4|--tensor-model-parallel-size 2 --expert-model-parallel-size 2 --expert-tensor-parallel-size 1 --zero-stage 1" \
                "4|--expert-model-parallel-size 2 --zero-stage 3 --stage3-param-persistence-threshold 0"; do
    np="${layout%%|*}"
    # shellcheck disable=SC2086
    mpirun --oversubscribe -np "$np" "$BIN/tessera-train" --model mixtral-tiny --mock-data --lr 1e-3 \
      --train-iters 1 --micro-batch-size 1 --global-batch-size 8 --num-threads 1 ${layout#*|} |
      grep '^> expert parallel:'
  done
fi

if [ "$what" = all ] || [ "$what" = dropless ]; then
  tmp="$(mktemp -d)"
  dropless_iters=8
  [ "$what" = dropless ] && dropless_iters="${iters:-8}"  # with "all", ITERATIONS is learning's
  mixtral=(--mock-data --lr 1e-3 --train-iters "$dropless_iters" --eval-interval 0
           --global-batch-size 8 --micro-batch-size 4 --seq-length 256
           --max-position-embeddings 256 --vocab-size 8192 --model mixtral-tiny --hidden-size 512
           --num-attention-heads 8 --num-query-groups 4 --num-layers 4 --moe-ffn-hidden-size 512)
  for run in 1 2; do
    for routing in padded dropless; do
      capacity=()
      [ "$routing" = padded ] &&
        capacity=(--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity)
      rm -f "$tmp/metrics.jsonl"
      # The whole run's peak resident set (the memory report's is the first iteration's).
      /usr/bin/time -o "$tmp/rss_kib" -f %M "$BIN/tessera-train" "${mixtral[@]}" "${capacity[@]}" \
        --metrics-file "$tmp/metrics.jsonl" >/dev/null
      /usr/bin/python3 - "$tmp/metrics.jsonl" "$routing" "$(cat "$tmp/rss_kib")" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
step = statistics.median(r["iter_time_s"] for r in rows)
gemm = statistics.median(r["gemm_s"] for r in rows)
rss = int(sys.argv[3]) / 1024
print(f"{sys.argv[2]:<9} step {step:.3f} s  products {gemm:.3f} s  peak RSS {rss:.0f} MiB")
PY
    done
  done
  rm -rf "$tmp"
fi

if [ "$what" = all ] || [ "$what" = learning ]; then
  iters="${iters:-600}"
  bash scripts/demo-data.sh
  out=demo-run/moe-bench
  mkdir -p "$out"
  common=(--config examples/demo_llama.json --data-path demo-run/fortunes_text_document
          --tokenizer-type HuggingFaceTokenizer --tokenizer-model demo-run/tokenizer.json
          --train-iters "$iters" --exit-duration-in-mins 0 --lr-decay-iters "$iters"
          --eval-interval "$iters" --eval-iters 20 --log-interval 100 --seed 1234 "${extra[@]}")
  "$BIN/tessera-train" "${common[@]}" --metrics-file "$out/dense.jsonl" | tee "$out/dense.log" |
    grep -E '^> model|^ iteration .*(00|0)/'
  "$BIN/tessera-train" "${common[@]}" --num-experts 8 --moe-router-topk 2 \
    --moe-ffn-hidden-size 176 --moe-aux-loss-coeff 0.01 --metrics-file "$out/moe.jsonl" |
    tee "$out/moe.log" | grep -E '^> model|^> moe|^ iteration .*(00|0)/'
  val() { grep -o '"val_loss":[0-9.eE+-]*' "$1" | tail -n 1 | cut -d: -f2; }
  tokens=$((iters * 32 * 128))
  echo "learning, $iters iterations ($tokens tokens${extra[*]:+, ${extra[*]}}): validation loss dense $(val "$out/dense.jsonl"), MoE 8x top-2 $(val "$out/moe.jsonl") (nats/token)"
fi
