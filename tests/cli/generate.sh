#!/bin/bash
# tessera-generate (docs/inference.md) on a LLaMA-style model trained here for a few iterations:
#  - its greedy continuation of 60 tokens (to the end of the 64-token context), loaded from the
#    Tessera checkpoint, is the argmax of tests/cli/hf_reference.py's independent float64 forward
#    at every step, and its log-probabilities are that forward's log-softmax within 1e-5;
#  - the same from the Hugging Face directory tessera-convert makes of the checkpoint, from a
#    checkpoint saved under TP 2 x PP 2 (any layout loads), and decoded under tensor parallelism
#    (mpirun -np 2 and 4: each rank its heads, KV cache and vocabulary columns);
#  - a seeded sampled run repeats itself; another seed gives other tokens;
#  - with a tokenizer: the text is the decoded tokens, and a stop string ends the text before it
#    (finish_reason "stop");
#  - bf16 compute runs; an fp8 KV cache runs and gives the same tokens under TP 2 (its effect on
#    the numbers: tests/unit/inference/engine_test.cc);
#  - bad input (a token outside the vocabulary, top_p 2, no prompt, a missing directory, text
#    without a tokenizer, an unknown KV cache dtype) is one line and exit code 2, under mpirun
#    too (once for the job).
# Usage: generate.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: generate.sh BUILD_BIN_DIR}"
GEN="$BIN_DIR/tessera-generate"
HERE="$(cd "$(dirname "$0")" && pwd)"
REF="$HERE/hf_reference.py"
source "$HERE/lib.bash" generate
source "$HERE/text_model.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
TRAIN=(--model llama-tiny --mock-data --train-iters 30 --micro-batch-size 2 --global-batch-size 8
       --lr 1e-2 --save-interval 30 --eval-interval 0 --seed 3)
PROMPT=5,17,200,3

quiet() { "$@" >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/out" "$TMP/err" >&2; return 1; }; }
field() {  # field NAME: the JSON field of $TMP/out's first line, as comma-separated values
  /usr/bin/python3 -c 'import json, sys
v = json.loads(open(sys.argv[1]).readline())[sys.argv[2]]
print(",".join(repr(x) for x in v) if isinstance(v, list) else v)' "$TMP/out" "$1"
}
# fails NAME PATTERN ARGS...: tessera-generate ARGS exits 2 with one stderr line matching PATTERN
fails() {
  "$GEN" "${@:2}" >"$TMP/out" 2>"$TMP/err"
  local code=$?
  [ $code -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q -- "$1" "$TMP/err" || {
    echo "  exit $code; stderr:" >&2
    sed 's/^/    /' "$TMP/err" >&2
    return 1
  }
}

check "train and save a LLaMA-style model" \
  quiet mpirun --oversubscribe -np 1 "$BIN_DIR/tessera-train" "${TRAIN[@]}" --save "$TMP/ckpt"
check "convert it to a Hugging Face directory" \
  quiet "$BIN_DIR/tessera-convert" --from tessera "$TMP/ckpt" --to hf "$TMP/hf"

check "greedy from the checkpoint" \
  quiet "$GEN" --load "$TMP/ckpt" --prompt-ids "$PROMPT" --temperature 0 --max-tokens 64 --json
tokens=$(field tokens)
logprobs=$(field logprobs)
check "60 tokens, ended by the context" test "$(field finish_reason)" = length -a \
  "$(echo "$tokens" | tr ',' '\n' | wc -l)" -eq 60
check "greedy tokens and log-probabilities equal the float64 reference" \
  /usr/bin/python3 "$REF" greedy "$TMP/hf" "$PROMPT" "$tokens" "$logprobs" 1e-5

check "greedy from the Hugging Face directory" \
  quiet "$GEN" --load "$TMP/hf" --prompt-ids "$PROMPT" --temperature 0 --max-tokens 64 --json
check "  the same tokens" test "$(field tokens)" = "$tokens"
for np in 2 4; do
  check "greedy under tensor parallelism: mpirun -np $np" quiet mpirun --oversubscribe -np "$np" \
    "$GEN" --load "$TMP/ckpt" --prompt-ids "$PROMPT" --temperature 0 --max-tokens 64 --json
  check "  the same tokens as one process, printed once" \
    test "$(field tokens)" = "$tokens" -a "$(wc -l <"$TMP/out")" -eq 1
done
check "train the same model under TP 2 x PP 2 and save" \
  quiet mpirun --oversubscribe -np 4 "$BIN_DIR/tessera-train" "${TRAIN[@]}" \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --save "$TMP/ckpt4"
check "greedy from the TP 2 x PP 2 checkpoint" \
  quiet "$GEN" --load "$TMP/ckpt4" --prompt-ids "$PROMPT" --temperature 0 --max-tokens 16 --json
check "  the same first tokens as one process's run" \
  test "$(field tokens)" = "$(echo "$tokens" | cut -d, -f1-16)"

sampled=(--load "$TMP/ckpt" --prompt-ids "$PROMPT" --max-tokens 20 --temperature 0.8 --top-k 40
         --top-p 0.9 --json)
check "seeded sampling" quiet "$GEN" "${sampled[@]}" --seed 11
first=$(field tokens)
check "  the same seed repeats its tokens" \
  bash -c "\"$GEN\" ${sampled[*]} --seed 11 | grep -q '\"tokens\":\[${first}\]'"
check "  another seed draws others" \
  bash -c "! \"$GEN\" ${sampled[*]} --seed 12 | grep -q '\"tokens\":\[${first}\]'"

# Text: a byte-level model trained on a small corpus of ASCII sentences.
check "train a byte-level model on a small corpus" train_text_model "$BIN_DIR" "$TMP/text"
check "text with a tokenizer" quiet "$GEN" --load "$TMP/text" --tokenizer-type ByteLevel \
  --prompt "document 1" --temperature 0 --max-tokens 24 --ignore-eos --json
text=$(field text)
check "  the text is the decoded tokens, ASCII" \
  /usr/bin/python3 -c 'import json, sys
j = json.loads(open(sys.argv[1]).readline())
sys.exit(0 if j["text"] == bytes(j["tokens"]).decode("ascii") else 1)' "$TMP/out"
stop=${text:4:2}
check "a stop string" quiet "$GEN" --load "$TMP/text" --tokenizer-type ByteLevel \
  --prompt "document 1" --temperature 0 --max-tokens 24 --ignore-eos --stop "$stop" --json
check "  ends the text before it" test "$(field text)" = "${text%%"$stop"*}" -a \
  "$(field finish_reason)" = stop
check "bf16 compute" quiet "$GEN" --load "$TMP/ckpt" --prompt-ids "$PROMPT" --dtype bf16 \
  --temperature 0 --max-tokens 8 --json

check "an fp8 KV cache (--kv-cache-dtype fp8)" quiet "$GEN" --load "$TMP/ckpt" \
  --prompt-ids "$PROMPT" --kv-cache-dtype fp8 --temperature 0 --max-tokens 24 --json
fp8_tokens=$(field tokens)
check "  24 tokens" test "$(echo "$fp8_tokens" | tr ',' '\n' | wc -l)" -eq 24
check "  the same tokens under tensor parallelism (mpirun -np 2)" quiet mpirun --oversubscribe \
  -np 2 "$GEN" --load "$TMP/ckpt" --prompt-ids "$PROMPT" --kv-cache-dtype fp8 --temperature 0 \
  --max-tokens 24 --json
check "  (printed once, equal)" test "$(wc -l <"$TMP/out")" -eq 1 -a "$(field tokens)" = "$fp8_tokens"
check "an unknown KV cache dtype" fails "kv-cache-dtype" --load "$TMP/ckpt" --prompt-ids 1 \
  --kv-cache-dtype fp4

check "a token outside the vocabulary" fails "outside the vocabulary" --load "$TMP/ckpt" \
  --prompt-ids 1,99999
check "top_p 2" fails "top_p" --load "$TMP/ckpt" --prompt-ids 1 --top-p 2
check "no prompt" fails "no prompt" --load "$TMP/ckpt"
check "a missing directory" fails "neither a Tessera checkpoint" --load "$TMP/nothing" \
  --prompt-ids 1
check "text without a tokenizer" fails "needs a tokenizer" --load "$TMP/ckpt" --prompt hi
# Under mpirun every rank finds the same error: the job reports it once.
mpirun --oversubscribe -np 2 "$GEN" --load "$TMP/nothing" --prompt-ids 1 >"$TMP/out" 2>"$TMP/err"
check "a missing directory under mpirun -np 2: exit 2, one error line" test $? -eq 2 -a \
  "$(grep -c "neither a Tessera checkpoint" "$TMP/err")" -eq 1

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
