#!/bin/bash
# tessera-plan against published cluster results, on paper (docs/planning.md, "Published results").
#
# With the DGX A100 description (examples/machines/dgx-a100.json: a description, not a
# measurement), predicts:
#   - throughput per GPU of the rows of Table 1 of Narayanan et al. 2021, "Efficient Large-Scale
#     Language Model Training on GPU Clusters Using Megatron-LM" (GPT, 1.7 B to 1 T parameters,
#     32 to 3072 A100s), counted as the paper counts it: 96 B s l h^2 (1 + s/6h + V/16lh) FLOPs
#     an iteration (full recomputation) over the iteration time and the GPUs;
#   - iteration time of Table 5 of Korthikanti et al. 2022, "Reducing Activation Recomputation
#     in Large Transformer Models" (22 B to 1 T, full recomputation and sequence parallelism +
#     selective recomputation, configurations of its Table 3);
#   - activation memory the first pipeline stage's layers keep for those configurations
#     (train::theoretical_kept_activations: what the formulas count, without the layer being
#     recomputed, the pipeline's transfer buffers and the backward's working set, which the
#     predicted peak printed beside it adds), against the paper's per-layer formulas (its
#     Table 2) for L layers (the 1F1B first stage holds P micro-batches of L/P layers;
#     x (1 + (P-1)/(PV)) with V virtual stages).
# Each row prints the published figure, the prediction and the error; then the largest errors.
#
# Usage: bench/plan_published.sh [BUILD_BIN_DIR] [MACHINE_JSON]
set -euo pipefail
BIN_DIR="${1:-build/bin}"
MACHINE="${2:-$(dirname "$0")/../examples/machines/dgx-a100.json}"
/usr/bin/python3 - "$BIN_DIR/tessera-plan" "$MACHINE" <<'PY'
import json, statistics, subprocess, sys
plan, machine = sys.argv[1], sys.argv[2]
S, V = 2048, 51200
COMMON = ["--mock-data", "--lr", "1e-4", "--train-iters", "1", "--eval-interval", "0",
          "--model", "gpt2-tiny", "--seq-length", str(S), "--max-position-embeddings", str(S),
          "--vocab-size", str(V), "--fp16",
          # Megatron reduces 16-bit activations over TP, and (without
          # --accumulate-allreduce-grads-in-fp32) the gradients over DP, in 16 bits: Tessera's
          # layouts that do the same (its bf16 gradient reduction moves the bytes fp16's would).
          "--tp-reduce-in-16-bit", "--grad-reduce-in-bf16"]
FULL = ["--recompute-granularity", "full", "--recompute-method", "uniform",
        "--recompute-num-layers", "1"]
SEQSEL = ["--sequence-parallel", "--recompute-granularity", "selective"]

def evaluate(gpus, heads, hidden, layers, tp, pp, batch, mbs, extra):
    flags = COMMON + ["--num-layers", str(layers), "--hidden-size", str(hidden),
                      "--num-attention-heads", str(heads), "--tensor-model-parallel-size", str(tp),
                      "--pipeline-model-parallel-size", str(pp), "--global-batch-size", str(batch),
                      "--micro-batch-size", str(mbs)] + extra
    out = subprocess.run([plan, "--evaluate", "--world-size", str(gpus), "--machine", machine,
                          "--json"] + flags, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"tessera-plan failed: {out.stderr.strip()}")
    return json.loads(out.stdout)

errors = {"time": [], "memory": []}
def row(kind, label, published, predicted, unit, more=""):
    e = (predicted - published) / published
    errors[kind].append((abs(e), label))
    print(f"| {label} | {published:.4g} {unit} | {predicted:.4g} {unit} | {e:+.1%} |{more}")

# Narayanan et al. 2021, Table 1: (B params, heads, hidden, layers, TP, PP, GPUs, batch, TFLOP/s
# per GPU). Micro-batch size (not in the table): 1 under a pipeline, else 4; no interleaving;
# full recomputation (the paper's FLOP count assumes it); gradients reduced after backward
# (Megatron-LM's local DDP of 2021 did not overlap them).
TABLE1 = [(1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
          (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
          (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
          (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
          (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
          (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
          (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163)]
print("Narayanan et al. 2021, Table 1: achieved teraFLOP/s per GPU\n")
print("| model | published | predicted | error |\n| --- | --- | --- | --- |")
for params, a, h, l, tp, pp, gpus, batch, published in TABLE1:
    r = evaluate(gpus, a, h, l, tp, pp, batch, 1 if pp > 1 else 4, FULL + ["--no-overlap-grad-reduce"])
    flops = 96 * batch * S * l * h * h * (1 + S / (6 * h) + V / (16 * l * h))
    row("time", f"{params} B ({gpus} GPUs, TP {tp}, PP {pp})", published,
        flops / r["step_time_s"] / gpus / 1e12, "TFLOP/s")

# Korthikanti et al. 2022, Table 3 configurations and Table 5 iteration times (s).
CONFIGS = [("22 B", 64, 6144, 48, 8, 1, 8, 4, 4, 1, 1.42, 1.10),
           ("175 B", 96, 12288, 96, 8, 8, 64, 64, 1, 3, 18.13, 13.75),
           ("530 B", 128, 20480, 105, 8, 35, 280, 280, 1, 3, 49.05, 37.83),
           ("1 T", 160, 25600, 128, 8, 64, 512, 512, 1, 1, 94.42, 71.49)]
print("\nKorthikanti et al. 2022, Table 5: iteration time\n")
print("| model, recomputation | published | predicted | error |\n| --- | --- | --- | --- |")
memory = []
for name, a, h, l, tp, pp, gpus, batch, mbs, v, full_s, seqsel_s in CONFIGS:
    virtual = ["--num-layers-per-virtual-pipeline-stage", str(l // (pp * v))] if v > 1 else []
    for mode, extra, published in (("full", FULL, full_s), ("sequence + selective", SEQSEL, seqsel_s)):
        r = evaluate(gpus, a, h, l, tp, pp, batch, mbs, extra + virtual)
        row("time", f"{name}, {mode}", published, r["step_time_s"], "s")
        first = r["ranks"][0]
        memory.append((name, mode, a, h, l, tp, pp, mbs, v, first["kept_activations_bytes"],
                       first["memory_bytes"]["activations"]))

print("\nKorthikanti et al. 2022, Table 2 formulas at Table 3's configurations: activation memory "
      "the first stage's layers keep (GiB), and the activations' peak predicted beside it\n")
print("| model, recomputation | paper's formula | predicted, kept | error | predicted peak |\n"
      "| --- | --- | --- | --- | --- |")
for name, mode, a, h, l, tp, pp, mbs, v, kept, peak in memory:
    sbh = S * mbs * h
    per_layer = 2 * sbh if mode == "full" else 34 * sbh / tp
    interleave = 1 + (pp - 1) / (pp * v) if v > 1 else 1
    row("memory", f"{name}, {mode}", per_layer * l * interleave / 2**30, kept / 2**30, "GiB",
        f" {peak / 2**30:.4g} GiB |")

for kind, limit in (("time", 0.15), ("memory", 0.10)):
    e = errors[kind]
    worst = max(e)
    print(f"\n{kind}: {len(e)} rows, median |error| {statistics.median(x for x, _ in e):.1%}, "
          f"largest {worst[0]:.1%} ({worst[1]}); rows within {limit:.0%}: "
          f"{sum(1 for x, _ in e if x <= limit)} of {len(e)}")
PY
