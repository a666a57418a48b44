#!/bin/bash
# --log-params-norm and --log-num-zeros-in-grad (Megatron's): the parameter norm equals the norm
# of the exported weights computed here in Python; the gradient's exact zeros equal the
# hand-counted ones of gpt2-tiny (the rows of the padded vocabulary and the position embeddings
# past the sequence length get no gradient: (padded_vocab - 257 + 128 - 64) x 64 elements at the
# first iteration); both are the single-process figures under TP x DP with the distributed
# optimizer, PP x ZeRO 3 and MoE expert parallelism; the log line carries them in Megatron's
# order. Usage: params_norm.sh BUILD_BIN_DIR
BIN="${1:?usage: params_norm.sh BUILD_BIN_DIR}/tessera-train"
source "$(dirname "$0")/lib.bash" params_norm
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FLAGS=(--mock-data --lr 1e-3 --train-iters 3 --micro-batch-size 1 --global-batch-size 4
       --log-interval 1 --num-threads 1 --eval-interval 0 --log-params-norm
       --log-num-zeros-in-grad)

# metric FILE ITERATION KEY: one value of a metrics file.
metric() {
  /usr/bin/python3 -c 'import json,sys
for l in open(sys.argv[1]):
    m = json.loads(l)
    if m["iteration"] == int(sys.argv[2]): print(repr(m[sys.argv[3]]))' "$@"
}

# same_figures A B: every iteration's params_norm within 1e-6 relative, num_zeros equal.
same_figures() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
ok = len(a) == len(b) == 3
for x, y in zip(a, b):
    if abs(x["params_norm"] - y["params_norm"]) > 1e-6 * y["params_norm"] or \
       x["num_zeros"] != y["num_zeros"]:
        ok = False
        print(f"  iteration {x['iteration']}: params norm {x['params_norm']} vs "
              f"{y['params_norm']}, zeros {x['num_zeros']} vs {y['num_zeros']}", file=sys.stderr)
sys.exit(0 if ok else 1)
PY
}

# Against the exported weights (fp32, no vocabulary padding): the last step's norm.
run 1 "${FLAGS[@]}" --model gpt2-tiny --make-vocab-size-divisible-by 1 \
  --metrics-file "$TMP/single1.jsonl" --export-weights "$TMP/w.safetensors"
check "export run: exit 0" [ $? -eq 0 ]
norm_of_file=$(/usr/bin/python3 - "$TMP/w.safetensors" <<'PY'
import array, json, math, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header, base, total = json.loads(data[8:8 + n]), 8 + n, 0.0
for name, t in header.items():
    if name == "__metadata__": continue
    assert t["dtype"] == "F32", name
    values = array.array("f")
    values.frombytes(data[base + t["data_offsets"][0]:base + t["data_offsets"][1]])
    total += sum(float(v) * v for v in values)
print(math.sqrt(total))
PY
)
logged=$(metric "$TMP/single1.jsonl" 3 params_norm)
check "params norm = the exported weights' norm ($logged vs $norm_of_file)" \
  /usr/bin/python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-9 * b)" \
  "$logged" "$norm_of_file"
check "num zeros, no vocabulary padding: (128 - 64) x 64" \
  [ "$(metric "$TMP/single1.jsonl" 1 num_zeros)" = "4096.0" ]
check "log line: grad norm, num zeros, params norm in Megatron's order" \
  grep -q "| grad norm: [0-9.]* | num zeros: 4096.0 | params norm: [0-9.]* | number of skipped" \
  "$TMP/out"

# The padding of two TP ranks (Megatron's: 128 x TP) in one process, then the layouts.
run 1 "${FLAGS[@]}" --model gpt2-tiny --make-vocab-size-divisible-by 256 \
  --metrics-file "$TMP/single256.jsonl"
check "num zeros, vocabulary padded to 512: (512 - 257 + 64) x 64" \
  [ "$(metric "$TMP/single256.jsonl" 1 num_zeros)" = "20416.0" ]
run 4 "${FLAGS[@]}" --model gpt2-tiny --tensor-model-parallel-size 2 --use-distributed-optimizer \
  --metrics-file "$TMP/tp2dp2.jsonl"
check "TP 2 x DP 2, distributed optimizer = one process" \
  same_figures "$TMP/tp2dp2.jsonl" "$TMP/single256.jsonl"
run 4 "${FLAGS[@]}" --model gpt2-tiny --pipeline-model-parallel-size 2 --zero-stage 3 \
  --make-vocab-size-divisible-by 256 --metrics-file "$TMP/pp2z3.jsonl"
check "PP 2 x DP 2, ZeRO 3 = one process" same_figures "$TMP/pp2z3.jsonl" "$TMP/single256.jsonl"

# MoE: experts are counted once over the expert-parallel ranks.
run 1 "${FLAGS[@]}" --model mixtral-tiny --metrics-file "$TMP/moe1.jsonl"
check "mixtral-tiny, one process: exit 0" [ $? -eq 0 ]
run 2 "${FLAGS[@]}" --model mixtral-tiny --expert-model-parallel-size 2 \
  --metrics-file "$TMP/ep2.jsonl"
check "mixtral-tiny EP 2 = one process" same_figures "$TMP/ep2.jsonl" "$TMP/moe1.jsonl"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
