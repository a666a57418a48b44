#!/bin/bash
# Weight-only quantization end to end (docs/quantization.md): a byte-level LLaMA-style model
# trained here, evaluated by tessera-eval-ppl with --quantize fp6, int8, q8_0 and q4 (the output
# layer quantized for some) and --kl-divergence: its perplexity, the unquantized perplexity and
# the mean KL divergence equal tests/cli/hf_reference.py's float64 forward of the same weights
# quantized by the formats' definitions written out in numpy; two tensor-parallel ranks give one
# process's perplexity for a group-wise format; tessera-generate runs quantized; bad input exits 2
# with one line.
# Usage: quantize.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: quantize.sh BUILD_BIN_DIR}"
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.bash" quantize
source "$HERE/text_model.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

# FFN 192: every weight's columns a multiple of 32, so the block formats apply.
check "train a byte-level model" train_text_model "$BIN_DIR" "$TMP/model" --ffn-hidden-size 192
check "convert it for the reference" "$BIN_DIR/tessera-convert" --from tessera "$TMP/model" \
  --to hf "$TMP/hf"
for i in $(seq 100 139); do echo "document $i says $((i * 5 % 11)) things about pears"; done >"$TMP/text.txt"
IDS=$(/usr/bin/python3 -c "import sys; print(','.join(str(b) for b in open(sys.argv[1], 'rb').read()))" "$TMP/text.txt")
EVAL=("$BIN_DIR/tessera-eval-ppl" --load "$TMP/model" --tokenizer-type ByteLevel --text-file "$TMP/text.txt" --json)

# agree GOT WANT: perplexities within 1e-4 relative, the KL divergence within 1e-3 (+1e-9).
agree() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
got, want = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for key, rel, floor in (("ppl", 1e-4, 0), ("base_ppl", 1e-4, 0), ("kl_mean", 1e-3, 1e-9)):
    if abs(got[key] - want[key]) > rel * abs(want[key]) + floor:
        sys.exit(f"  {key}: tessera {got[key]} vs reference {want[key]}")
print(f"  {got['model']}: ppl {got['ppl']:.5f} (unquantized {got['base_ppl']:.5f}), "
      f"KL {got['kl_mean']:.3e}, same top token {100 * got['same_top']:.1f}%")
PY
}
for case in "fp6 0" "fp6 1" "int8 0" "q8_0 1" "q4 0" "q4 1"; do
  set -- $case
  out=("--quantize" "$1" "--kl-divergence")
  [ "$2" = 1 ] && out+=(--quantize-output-layer)
  got=$("${EVAL[@]}" "${out[@]}" 2>&1)
  want=$(/usr/bin/python3 "$HERE/hf_reference.py" ppl "$TMP/hf" "$IDS" 64 "$1" "$2")
  check "$1 (output layer $2): perplexity and KL divergence are the float64 reference's" agree "$got" "$want"
done

one=$("${EVAL[@]}" --quantize q8_0)
two=$(timeout 120 mpirun --oversubscribe -np 2 "${EVAL[@]}" --quantize q8_0)
check "q8_0 under TP 2: one process's perplexity" /usr/bin/python3 -c "
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert abs(a['ppl'] - b['ppl']) <= 1e-5 * a['ppl'], (a['ppl'], b['ppl'])" "$one" "$two"
check "tessera-generate --quantize q4" bash -c "\"$BIN_DIR/tessera-generate\" --load \"$TMP/model\" \
  --tokenizer-type ByteLevel --prompt 'document 3' --max-tokens 20 --temperature 0 --quantize q4 \
  --json | grep -q '\"tokens\"'"

# bad CMD...: exit code 2 and one line on stderr.
bad() {
  "$@" >"$TMP/out" 2>"$TMP/err"
  local code=$?
  [ "$code" = 2 ] && [ "$(wc -l <"$TMP/err")" = 1 ] || {
    echo "  exit $code: $(cat "$TMP/err")" >&2
    return 1
  }
}
check "an unknown format" bad "${EVAL[@]}" --quantize nf4
check "--kl-divergence without --quantize" bad "${EVAL[@]}" --kl-divergence
check "a group size q4 does not take" bad "${EVAL[@]}" --quantize q4 --quantize-group-size 48
check "a window longer than the context" bad "${EVAL[@]}" --seq-length 4096
check "no text" bad "$BIN_DIR/tessera-eval-ppl" --load "$TMP/model"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
