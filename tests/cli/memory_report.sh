#!/bin/bash
# The memory report of the first iteration (train/memory_report.h): for DP 2 under ZeRO 0-3, PP 2
# (1F1B and interleaved), TP 2 with and without sequence parallelism, TP 2 x PP 2, full (uniform
# and block) and selective recomputation and MoE expert parallelism, the theoretical parameters,
# gradients and optimizer state (the layout's arithmetic from the configuration) agree with the
# measured ones (resident bytes of the flat buffers, the memory accountant) within 5%, and so do
# the activations' and the communication buffers' (the accountant's peaks; nothing beyond a few
# hundred bytes where none are expected) for the dense models; the report lists every category
# and the peak resident set. Usage: memory_report.sh BUILD_BIN_DIR
BIN="${1:?usage: memory_report.sh BUILD_BIN_DIR}/tessera-train"
source "$(dirname "$0")/lib.bash" memory_report
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Layers of 0.8M elements: above ZeRO 3's persistence threshold (1e5), so they are sharded.
FLAGS=(--mock-data --lr 1e-3 --train-iters 1 --micro-batch-size 1 --global-batch-size 4
       --num-threads 1 --eval-interval 0 --bf16)
GPT=(--model gpt2-tiny --hidden-size 256 --num-attention-heads 4 --num-layers 4)
MOE=(--model mixtral-tiny --hidden-size 128 --num-attention-heads 4 --ffn-hidden-size 384)

# within_5_percent [activations]: the report in $TMP/out has every category, and the model
# states (and the activations, when asked) within 5%.
within_5_percent() {
  /usr/bin/python3 - "$TMP/out" "${1:-}" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
checked = ["parameters", "gradients", "optimizer state"] + (
    ["activations", "communication buffers"] if sys.argv[2] == "activations" else [])
ok = "memory report, rank" in text and "peak resident set of the process" in text
for name in ["parameters", "gradients", "optimizer state", "activations",
             "communication buffers", "other"]:
    m = re.search(r"^>   %s +(\S+) \| +(\S+) \|" % re.escape(name), text, re.M)
    if not m:
        print(f"  no line for {name}", file=sys.stderr); ok = False; continue
    if name in checked:
        theory, measured = float(m.group(1)), float(m.group(2))
        # Nothing expected (no ZeRO, no TP): at most the scalars' few hundred bytes.
        if theory == 0 and name == "communication buffers":
            good = measured <= 0.001
        else:
            good = theory > 0 and abs(measured - theory) <= 0.05 * theory
        if not good:
            print(f"  {name}: theory {theory} MiB, measured {measured} MiB", file=sys.stderr)
            ok = False
sys.exit(0 if ok else 1)
PY
}

layout() {  # layout NAME NP FLAGS...: one run, its report checked (activations too if dense)
  local name="$1" np="$2" what=activations
  shift 2
  [[ " $* " == *" mixtral-tiny "* ]] && what=""
  run "$np" "${FLAGS[@]}" "$@"
  check "$name: exit 0, model states${what:+ and activations} within 5% of the theory" \
    within_5_percent $what
}

for stage in 0 1 2 3; do layout "DP 2, ZeRO $stage" 2 "${GPT[@]}" --zero-stage "$stage"; done
layout "PP 2, GPipe" 2 "${GPT[@]}" --pipeline-model-parallel-size 2 --pipeline-schedule gpipe
layout "PP 2, 1F1B" 2 "${GPT[@]}" --pipeline-model-parallel-size 2
layout "PP 2, interleaved (V 2)" 2 "${GPT[@]}" --pipeline-model-parallel-size 2 \
  --num-layers-per-virtual-pipeline-stage 1
layout "TP 2" 2 "${GPT[@]}" --tensor-model-parallel-size 2
layout "TP 2 + SP" 2 "${GPT[@]}" --tensor-model-parallel-size 2 --sequence-parallel
layout "TP 2 + SP x DP 2, ZeRO 1" 4 "${GPT[@]}" --tensor-model-parallel-size 2 \
  --sequence-parallel --zero-stage 1
layout "TP 2 + SP x PP 2" 4 "${GPT[@]}" --tensor-model-parallel-size 2 --sequence-parallel \
  --pipeline-model-parallel-size 2
layout "full recomputation, uniform 1" 1 "${GPT[@]}" --recompute-granularity full \
  --recompute-method uniform --recompute-num-layers 1
layout "full recomputation, uniform 2" 1 "${GPT[@]}" --recompute-granularity full \
  --recompute-method uniform --recompute-num-layers 2
layout "full recomputation, block 2" 1 "${GPT[@]}" --recompute-granularity full \
  --recompute-method block --recompute-num-layers 2
layout "selective recomputation" 1 "${GPT[@]}" --recompute-granularity selective
layout "PP 2 x DP 2, ZeRO 3 (the split tied embedding's units)" 4 "${GPT[@]}" \
  --pipeline-model-parallel-size 2 --zero-stage 3
layout "MoE EP 2, ZeRO 3" 2 "${MOE[@]}" --expert-model-parallel-size 2 --zero-stage 3
layout "MoE EP 1 x DP 2, ZeRO 3 (experts inside the layer's unit)" 2 "${MOE[@]}" --zero-stage 3

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
