#!/bin/bash
# tessera-plan's step-time model against measured steps on this machine (docs/planning.md).
#
# Calibrates this machine (tessera-plan --calibrate with 1 and 2 ranks), then for each layout of a
# GPT- and a LLaMA-style model on 1-2 ranks (no oversubscription: 2 ranks x 1 thread or 1 x 2 on
# the 2 cores) predicts the step time (tessera-plan --evaluate --machine) and measures it
# (tessera-train's metrics file: the median iter_time_s of iterations 3..N, the first two being
# warm-up). Prints each layout's predicted and measured seconds, the error, rank 0's matrix
# products predicted (compute_gemm_s) against measured (gemm_s) and the rest (step less products),
# and the predicted components; then the median and largest |error| of the step and of the
# products, and which GPT layout the plan ranks first against the measured best (same model,
# same global batch).
#
# Usage: bench/plan_time.sh [BUILD_BIN_DIR] [MACHINE_JSON]
#   MACHINE_JSON: the description to use; calibrated into that path first when it does not exist
#   (default: a temporary one, calibrated).
# Environment: ITERS (default 7) iterations a run; NVME_DIR (default: the current directory) the
#   file system the NVMe optimizer-offload layouts swap to (it must take O_DIRECT: not a tmpfs).
set -euo pipefail
BIN_DIR="${1:-build/bin}"
MACHINE="${2:-}"
ITERS="${ITERS:-7}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP="$(mktemp -d)"
SWAP="$(mktemp -d -p "${NVME_DIR:-$PWD}" plan-time-swap.XXXXXX)"
trap 'rm -rf "$TMP" "$SWAP"' EXIT

[[ -n "$MACHINE" ]] || MACHINE="$TMP/machine.json"
if [[ ! -f "$MACHINE" ]]; then
  echo "calibrating this machine into $MACHINE (1 rank, then 2 ranks) ..."
  "$BIN_DIR/tessera-plan" --calibrate --machine "$MACHINE" --name "this machine" \
    --nvme-path "$SWAP"
  mpirun --oversubscribe -np 2 "$BIN_DIR/tessera-plan" --calibrate --machine "$MACHINE" \
    --nvme-path "$SWAP"
fi

COMMON=(--mock-data --lr 1e-3 --train-iters "$ITERS" --eval-interval 0 --global-batch-size 8
        --seq-length 256 --max-position-embeddings 256 --vocab-size 8192)
GPT=(--model gpt2-tiny --hidden-size 512 --num-attention-heads 8 --num-layers 4)
LLAMA=(--model llama-tiny --hidden-size 512 --num-attention-heads 8 --num-query-groups 4
       --num-layers 4)
# Mixtral-style: every layer 8 SwiGLU experts of 512, top-2 (capacity 1 padded: every expert
# computes exactly its balanced rows, as the model prices them; dropless: as the router chose).
MIXTRAL=(--model mixtral-tiny --hidden-size 512 --num-attention-heads 8 --num-query-groups 4
         --num-layers 4 --moe-ffn-hidden-size 512)
PADDED=(--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity)
: >"$TMP/rows"

# layout NAME GROUP NP FLAGS...: predicted against measured; GROUP names the candidates ranked
# together ("-": not ranked).
layout() {
  local name="$1" group="$2" np="$3"
  shift 3
  local flags=("${COMMON[@]}" "$@")
  "$BIN_DIR/tessera-plan" --evaluate --world-size "$np" --machine "$MACHINE" --json "${flags[@]}" \
    >"$TMP/plan.json"
  rm -f "$TMP/metrics.jsonl"
  # One rank runs without mpirun, which would bind it to one core (as --calibrate ran).
  local launch=(mpirun --oversubscribe -np "$np")
  [[ "$np" == 1 ]] && launch=()
  "${launch[@]}" "$BIN_DIR/tessera-train" "${flags[@]}" \
    --metrics-file "$TMP/metrics.jsonl" >"$TMP/out" 2>&1 || {
    echo "tessera-train failed for $name:" >&2
    tail -5 "$TMP/out" >&2
    exit 1
  }
  /usr/bin/python3 - "$TMP/plan.json" "$TMP/metrics.jsonl" "$name" "$group" >>"$TMP/rows" <<'PY'
import json, statistics, sys
plan = json.load(open(sys.argv[1]))
rows = [json.loads(l) for l in open(sys.argv[2])][2:]
measured = statistics.median(r["iter_time_s"] for r in rows)
c = plan["components_s"]
# The products apart (rank 0's: the metrics file is rank 0's): predicted compute_gemm_s against
# the measured gemm_s, so an error can be told to be the products' or the rest's.
print(json.dumps({"name": sys.argv[3], "group": sys.argv[4], "predicted": plan["step_time_s"],
                  "measured": measured, "components": c,
                  "gemm_predicted": plan["ranks"][0]["compute_gemm_s"],
                  "gemm_measured": statistics.median(r["gemm_s"] for r in rows)}))
PY
  tail -1 "$TMP/rows" | /usr/bin/python3 -c "$SHOW_ROW"
}
SHOW_ROW='
import json, sys
r = json.loads(sys.stdin.read())
name, p, m = r["name"], r["predicted"], r["measured"]
parts = " ".join(f"{k} {v:.3f}" for k, v in r["components"].items() if v > 0)
gp, gm = r["gemm_predicted"], r["gemm_measured"]
print(f"{name:<36} predicted {p:6.3f} s  measured {m:6.3f} s  {(p - m) / m:+6.1%}  "
      f"(products {gp:.3f} vs {gm:.3f} s {(gp - gm) / gm:+.1%}, the rest "
      f"{p - gp:.3f} vs {m - gm:.3f} s {(p - gp - m + gm) / (m - gm):+.1%}; {parts})")'

layout "gpt, 1 rank, fp32" gpt 1 "${GPT[@]}" --micro-batch-size 4
layout "gpt, 1 rank, micro-batch 8" gpt 1 "${GPT[@]}" --micro-batch-size 8
layout "gpt, 1 rank, micro-batch 2" gpt 1 "${GPT[@]}" --micro-batch-size 2
layout "gpt, 1 rank, full recompute" gpt 1 "${GPT[@]}" --micro-batch-size 4 \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
layout "gpt, 1 rank, selective recompute" gpt 1 "${GPT[@]}" --micro-batch-size 4 \
  --recompute-granularity selective
for stage in 0 1 2 3; do
  layout "gpt, DP 2, ZeRO $stage" gpt 2 "${GPT[@]}" --micro-batch-size 4 --zero-stage "$stage"
done
layout "gpt, TP 2" gpt 2 "${GPT[@]}" --micro-batch-size 4 --tensor-model-parallel-size 2
layout "gpt, TP 2 + SP" gpt 2 "${GPT[@]}" --micro-batch-size 4 --tensor-model-parallel-size 2 \
  --sequence-parallel
layout "gpt, PP 2, 1F1B" gpt 2 "${GPT[@]}" --micro-batch-size 2 --pipeline-model-parallel-size 2
layout "gpt, PP 2, GPipe" gpt 2 "${GPT[@]}" --micro-batch-size 2 --pipeline-model-parallel-size 2 \
  --pipeline-schedule gpipe
layout "gpt, PP 2, interleaved (V 2)" gpt 2 "${GPT[@]}" --micro-batch-size 2 \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
for type in p2p all_gather a2a; do
  layout "gpt, CP 2 ($type)" gpt 2 "${GPT[@]}" --micro-batch-size 4 --context-parallel-size 2 \
    --cp-comm-type "$type"
done
layout "gpt, 1 rank, bf16" - 1 "${GPT[@]}" --micro-batch-size 4 --bf16
layout "gpt, DP 2, ZeRO 1, bf16" - 2 "${GPT[@]}" --micro-batch-size 4 --zero-stage 1 --bf16
layout "llama, 1 rank, bf16" - 1 "${LLAMA[@]}" --micro-batch-size 4 --bf16
layout "llama, TP 2, bf16" - 2 "${LLAMA[@]}" --micro-batch-size 4 --tensor-model-parallel-size 2 \
  --bf16
layout "llama, CP 2 (p2p), bf16" - 2 "${LLAMA[@]}" --micro-batch-size 4 --context-parallel-size 2 \
  --bf16
layout "llama, DP 2, ZeRO 2" - 2 "${LLAMA[@]}" --micro-batch-size 4 --zero-stage 2
layout "mixtral, 1 rank, padded" - 1 "${MIXTRAL[@]}" --micro-batch-size 4 "${PADDED[@]}"
layout "mixtral, 1 rank, dropless" - 1 "${MIXTRAL[@]}" --micro-batch-size 4
layout "mixtral, EP 2, padded" - 2 "${MIXTRAL[@]}" --micro-batch-size 4 \
  --expert-model-parallel-size 2 "${PADDED[@]}"
layout "mixtral, DP 2, ZeRO 1, dropless" - 2 "${MIXTRAL[@]}" --micro-batch-size 4 --zero-stage 1
# NVMe optimizer offload (ZeRO 1 at DP 1): DeepSpeed's defaults (one sub-group), pipelined
# sub-groups of 2 M elements, and bf16 (three arrays: the fp32 master weights too).
OFFLOAD=(--zero-stage 1 --offload-optimizer-nvme-path "$SWAP")
layout "gpt, 1 rank, NVMe offload" - 1 "${GPT[@]}" --micro-batch-size 4 "${OFFLOAD[@]}"
layout "gpt, 1 rank, NVMe offload pipelined" - 1 "${GPT[@]}" --micro-batch-size 4 "${OFFLOAD[@]}" \
  --offload-pipeline --offload-sub-group-size 2000000
layout "gpt, 1 rank, NVMe offload, bf16" - 1 "${GPT[@]}" --micro-batch-size 4 "${OFFLOAD[@]}" \
  --bf16 --offload-pipeline --offload-sub-group-size 2000000
# ZeRO 3 parameters on NVMe, every part swapped; then with the optimizer state there too.
PARAMS=(--zero-stage 3 --offload-param-nvme-path "$SWAP" --offload-param-max-in-cpu 0)
layout "gpt, 1 rank, parameters on NVMe" - 1 "${GPT[@]}" --micro-batch-size 4 "${PARAMS[@]}"
layout "gpt, 1 rank, parameters + optimizer on NVMe" - 1 "${GPT[@]}" --micro-batch-size 4 \
  "${PARAMS[@]}" --offload-optimizer-nvme-path "$SWAP"

/usr/bin/python3 - "$TMP/rows" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
errors = [abs(r["predicted"] - r["measured"]) / r["measured"] for r in rows]
print(f"\n{len(rows)} layouts: median |error| {statistics.median(errors):.1%}, "
      f"largest {max(errors):.1%}")
products = [abs(r["gemm_predicted"] - r["gemm_measured"]) / r["gemm_measured"] for r in rows]
print(f"the products alone (rank 0's): median |error| {statistics.median(products):.1%}, "
      f"largest {max(products):.1%}")
for group in sorted({r["group"] for r in rows} - {"-"}):
    g = [r for r in rows if r["group"] == group]
    first = min(g, key=lambda r: r["predicted"])
    best = min(g, key=lambda r: r["measured"])
    print(f"{group}: ranked first '{first['name']}' measured {first['measured']:.3f} s; "
          f"measured best '{best['name']}' {best['measured']:.3f} s "
          f"({first['measured'] / best['measured'] - 1:+.1%})")
PY
