#!/bin/bash
# Quantized Hugging Face-style directories (docs/quantization.md) on the byte-level text model
# (ffn 192, so every row is whole groups of 32 and 64):
#  - tessera-convert --quantize FORMAT of the checkpoint, for fp6, int8, q8_0, q4 (and q4 with
#    groups of 64 and the output layer): tessera-generate --load QDIR gives the tokens of
#    tessera-generate --load CKPT --quantize FORMAT, token for token;
#  - from the Hugging Face directory the same bytes as from the checkpoint;
#  - under tensor parallelism (mpirun -np 2): q8_0's stored codes give the tokens of quantizing
#    on load (groups do not cross the shards); fp6 loads with the whole rows' scales; q4 with
#    groups of 64 is refused (a rank's 32 columns of o_proj split a group);
#  - sharded (--max-shard-size): the same tensors byte for byte over shards and an index, the
#    same tokens, in one process and under TP 2;
#  - an MoE model (Mixtral-style): the experts stored as codes, the router F32, the same tokens
#    as quantizing on load, in one process and under TP 2;
#  - the files' sizes follow the bits a weight (printed);
#  - bad input is one line and exit code 2: an unknown format, a shape the format cannot pack,
#    a directory whose tensors disagree with its metadata (code bytes, a missing scale, a dtype,
#    an unknown format, a group size), and a quantized directory for training or conversion.
# Usage: quantized_checkpoint.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: quantized_checkpoint.sh BUILD_BIN_DIR}"
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.bash" quantized_checkpoint
source "$HERE/text_model.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
GEN="$BIN_DIR/tessera-generate"
CONVERT="$BIN_DIR/tessera-convert"
PROMPT=100,111,99,117,109,101,110,116,32  # "document "
GREEDY=(--prompt-ids "$PROMPT" --temperature 0 --max-tokens 24 --json)

quiet() { "$@" >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/out" "$TMP/err" >&2; return 1; }; }
tokens() {  # tokens: the "tokens" of $TMP/out's first line
  /usr/bin/python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["tokens"])' \
    "$TMP/out"
}
# fails PATTERN COMMAND...: COMMAND exits 2 with exactly one error line, matching PATTERN (and,
# without mpirun, nothing else on stderr; under mpirun, which reports the exit code in lines of
# its own, tessera-generate's ranks each print the same line: counted once)
fails() {
  "${@:2}" >"$TMP/out" 2>"$TMP/err"
  local code=$? lines
  lines=$(grep -c . "$TMP/err")
  [ "$2" = mpirun ] && lines=$(grep -E "(^|: )error: " "$TMP/err" | sort -u | wc -l)
  [ $code -eq 2 ] && [ "$lines" -eq 1 ] && grep -E "(^|: )error: " "$TMP/err" | grep -q -- "$1" || {
    echo "  exit $code; stderr:" >&2
    sed 's/^/    /' "$TMP/err" >&2
    return 1
  }
}
# same_tokens WHAT QDIR ON_LOAD_FLAGS...: greedy tokens of QDIR equal those of the checkpoint
# ($CKPT, default the dense model's) quantized on load with ON_LOAD_FLAGS (under $NP processes)
same_tokens() {
  local what="$1" qdir="$2" stored
  shift 2
  check "$what: generate from the quantized directory" \
    quiet mpirun --oversubscribe -np "$NP" "$GEN" --load "$qdir" "${GREEDY[@]}"
  stored=$(tokens)
  check "$what: generate from the checkpoint with $*" \
    quiet mpirun --oversubscribe -np "$NP" "$GEN" --load "${CKPT:-$TMP/ckpt}" "$@" "${GREEDY[@]}"
  check "$what: the same tokens ($stored)" test "$stored" = "$(tokens)" -a "$stored" != "[]"
}

check "train the text model with ffn 192" train_text_model "$BIN_DIR" "$TMP/ckpt" \
  --ffn-hidden-size 192
check "convert it unquantized" quiet "$CONVERT" --from tessera "$TMP/ckpt" --to hf "$TMP/hf"

NP=1
for format in fp6 int8 q8_0 q4; do
  check "convert to $format" \
    quiet "$CONVERT" --from tessera "$TMP/ckpt" --to hf "$TMP/q-$format" --quantize "$format"
  same_tokens "$format" "$TMP/q-$format" --quantize "$format"
done
check "convert to q4, groups of 64, output layer" \
  quiet "$CONVERT" --from tessera "$TMP/ckpt" --to hf "$TMP/q-q4-64" --quantize q4 \
  --quantize-group-size 64 --quantize-output-layer
same_tokens "q4/64 + output layer" "$TMP/q-q4-64" --quantize q4 --quantize-group-size 64 \
  --quantize-output-layer
check "config.json's block" grep -q '"quantization": {' "$TMP/q-q4-64/config.json"
check "  format, group size, output layer" /usr/bin/python3 -c 'import json, sys
q = json.load(open(sys.argv[1]))["quantization"]
assert q == {"format": "q4", "group_size": 64, "output_layer": True}, q' \
  "$TMP/q-q4-64/config.json"

check "convert the Hugging Face directory to int8" \
  quiet "$CONVERT" --from hf "$TMP/hf" --to hf "$TMP/q-hf-int8" --quantize int8
check "  the same bytes as from the checkpoint" \
  cmp "$TMP/q-hf-int8/model.safetensors" "$TMP/q-int8/model.safetensors"

# Sharded: the same tensors, byte for byte, spread over shards and an index (every shard carries
# the quantization metadata), and the same tokens.
check "convert to q8_0 in shards of 100 kB" \
  quiet "$CONVERT" --from tessera "$TMP/ckpt" --to hf "$TMP/q-shards" --quantize q8_0 \
  --max-shard-size 1e5
check "  shards, an index, no single file" /usr/bin/python3 -c '
import glob, json, os, struct, sys
single, sharded = sys.argv[1], sys.argv[2]
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    md = h.pop("__metadata__")
    return md, {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
                for k, v in h.items()}
assert not os.path.exists(sharded + "/model.safetensors")
shards = sorted(glob.glob(sharded + "/model-*-of-*.safetensors"))
assert len(shards) >= 3, shards
index = json.load(open(sharded + "/model.safetensors.index.json"))
_, want = tensors(single + "/model.safetensors")
got = {}
for path in shards:
    md, t = tensors(path)
    assert md == {"format": "pt", "quantization": "q8_0", "quantization_group_size": "32"}, md
    for name in t:
        assert index["weight_map"][name] == os.path.basename(path), name
    got.update(t)
assert got == want, sorted(set(got) ^ set(want))
assert index["metadata"]["total_size"] == sum(len(v[2]) for v in want.values())
print(len(shards), "shards")' "$TMP/q-q8_0" "$TMP/q-shards"
same_tokens "q8_0 in shards" "$TMP/q-shards" --quantize q8_0

NP=2
same_tokens "q8_0 under TP 2" "$TMP/q-q8_0" --quantize q8_0
same_tokens "q8_0 in shards under TP 2" "$TMP/q-shards" --quantize q8_0
check "fp6 under TP 2 (whole rows' scales)" \
  quiet mpirun --oversubscribe -np 2 "$GEN" --load "$TMP/q-fp6" "${GREEDY[@]}"
check "q4/64 under TP 2 is refused" fails "32 columns of a row are not whole groups of 64" \
  mpirun --oversubscribe -np 2 "$GEN" --load "$TMP/q-q4-64" "${GREEDY[@]}"

# MoE (Mixtral-style, 4 experts, top 2): every expert's weights are stored as codes, the router
# as F32, and the stored codes give the tokens of quantizing on load, in one process (q8_0, fp6)
# and under TP 2 (q8_0).
check "train an MoE text model" train_text_model "$BIN_DIR" "$TMP/ckpt-moe" --ffn-hidden-size 192 \
  --num-experts 4 --moe-router-topk 2
NP=1
for format in q8_0 fp6; do
  check "convert the MoE model to $format" \
    quiet "$CONVERT" --from tessera "$TMP/ckpt-moe" --to hf "$TMP/q-moe-$format" --quantize "$format"
  CKPT="$TMP/ckpt-moe" same_tokens "MoE $format" "$TMP/q-moe-$format" --quantize "$format"
done
# (fp6: under TP a row-parallel shard quantized on load has its own per-row scales, the stored
# directory the whole rows' (docs/quantization.md, "Loading"), so the two need not agree.)
NP=2
CKPT="$TMP/ckpt-moe" same_tokens "MoE q8_0 under TP 2" "$TMP/q-moe-q8_0" --quantize q8_0
check "  experts as codes, routers F32" /usr/bin/python3 -c '
import json, struct, sys
raw = open(sys.argv[1] + "/model.safetensors", "rb").read()
h = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
experts = [k for k in h if ".experts." in k and k.endswith(".weight")]
assert len(experts) == 2 * 4 * 3, experts  # 2 layers, 4 experts, w1/w2/w3
assert all(h[k]["dtype"] == "U8" and k + ".scale" in h for k in experts), experts
routers = [k for k in h if k.endswith("block_sparse_moe.gate.weight")]
assert len(routers) == 2 and all(h[k]["dtype"] == "F32" for k in routers), routers' \
  "$TMP/q-moe-q8_0"

size() { stat -c %s "$1/model.safetensors"; }
echo "model.safetensors bytes: F32 $(size "$TMP/hf"), q8_0 $(size "$TMP/q-q8_0")," \
  "int8 $(size "$TMP/q-int8"), fp6 $(size "$TMP/q-fp6"), q4 $(size "$TMP/q-q4")," \
  "q4/64 + output layer $(size "$TMP/q-q4-64")"
# The linear weights shrink by their bits a weight; the embedding, norms (and the untied output
# layer) stay F32 in every one of them.
check "sizes: F32 > q8_0 > int8 > fp6 > q4" test "$(size "$TMP/hf")" -gt "$(size "$TMP/q-q8_0")" \
  -a "$(size "$TMP/q-q8_0")" -gt "$(size "$TMP/q-int8")" \
  -a "$(size "$TMP/q-int8")" -gt "$(size "$TMP/q-fp6")" \
  -a "$(size "$TMP/q-fp6")" -gt "$(size "$TMP/q-q4")"
check "  F32 minus q8_0 is the linear weights' 32 - 8.5 bits a weight" /usr/bin/python3 -c '
import sys
f32, q8 = int(sys.argv[1]), int(sys.argv[2])
layers, C, F, kv = 2, 64, 192, 32  # llama-tiny: 4 heads, 2 key/value groups of head dim 16
weights = layers * (C * (C + 2 * kv) + C * C + 3 * C * F)
saved = weights * 4 - weights - weights // 32 * 2
# the headers differ a little (names of the .scale tensors)
assert abs((f32 - q8) - saved) < 4096, (f32 - q8, saved)' "$(size "$TMP/hf")" "$(size "$TMP/q-q8_0")"

# Bad input.
check "an unknown format" fails "quantization format \"q5\": expected one of" \
  "$CONVERT" --from tessera "$TMP/ckpt" --to hf "$TMP/bad" --quantize q5
check "a group size for q8_0" fails "only q4 takes a group size" \
  "$CONVERT" --from tessera "$TMP/ckpt" --to hf "$TMP/bad" --quantize q8_0 \
  --quantize-group-size 64
check "train a model with ffn 176" train_text_model "$BIN_DIR" "$TMP/ckpt176" --train-iters 2 \
  --save-interval 2
check "q8_0 of ffn 176 is refused naming the tensor" \
  fails "down_proj.weight: .*176 columns is not a multiple of 32" \
  "$CONVERT" --from tessera "$TMP/ckpt176" --to hf "$TMP/bad" --quantize q8_0

# damage DIR EDIT: a copy of DIR whose safetensors header (and config.json) EDIT (Python,
# on `h`, the header dict, and `c`, config.json) changed, the data untouched
damage() {
  rm -rf "$TMP/bad" && cp -r "$1" "$TMP/bad" && /usr/bin/python3 -c '
import json, struct, sys
path, edit = sys.argv[1], sys.argv[2]
raw = open(path + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h, data = json.loads(raw[8:8 + n]), raw[8 + n:]
c = json.load(open(path + "/config.json"))
exec(edit)
text = json.dumps(h).encode()
text += b" " * (-len(text) % 8)
open(path + "/model.safetensors", "wb").write(struct.pack("<Q", len(text)) + text + data)
json.dump(c, open(path + "/config.json", "w"))' "$TMP/bad" "$2"
}
W=model.layers.0.mlp.down_proj.weight
damaged() {  # damaged DESCRIPTION PATTERN EDIT: generate from the damaged q4 copy fails
  check "$1" damage "$TMP/q-q4" "$3"
  check "  refused: $1" fails "$2" "$GEN" --load "$TMP/bad" "${GREEDY[@]}"
}
damaged "code bytes that do not fit the shape" "$W' has shape \[32, 192\], expected \[64, 96\]" \
  "h['$W']['shape'] = [32, 192]"  # the same byte count, rows of 192 bytes instead of q4's 96
damaged "a missing scale" "$W.scale' is missing" \
  "h['$W.scale_'] = h.pop('$W.scale')"
damaged "codes not U8" "$W': dtype I8, expected U8" "h['$W']['dtype'] = 'I8'"
damaged "an unknown format in the metadata" 'quantization": quantization format "q3"' \
  "h['__metadata__']['quantization'] = 'q3'"
damaged "a group size that does not match the scales" "$W.scale' has shape \[64, 6\], expected \[64, 3\]" \
  "c['quantization']['group_size'] = 64; h['__metadata__']['quantization_group_size'] = '64'"
check "an unknown format in config.json" damage "$TMP/q-q4" "c['quantization']['format'] = 'q3'"
check "  refused" fails "key 'quantization': quantization format \"q3\"" \
  "$GEN" --load "$TMP/bad" "${GREEDY[@]}"

check "--quantize on a quantized directory" fails "is already quantized to q4" \
  "$GEN" --load "$TMP/q-q4" --quantize int8 "${GREEDY[@]}"
check "conversion to a Tessera checkpoint" fails "quantized weights are for inference" \
  "$CONVERT" --from hf "$TMP/q-q4" --to tessera "$TMP/bad-ckpt"
check "training from it" fails "quantized weights are for inference" \
  mpirun --oversubscribe -np 1 "$BIN_DIR/tessera-train" --load "$TMP/q-q4" --finetune \
  --tokenizer-type ByteLevel --data-path "$TMP/c_text_document" --data-cache-path "$TMP/cache" \
  --split 100,0,0 --train-iters 2 --micro-batch-size 4 --global-batch-size 4 --lr 1e-2 \
  --eval-interval 0

echo "quantized_checkpoint.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
