#!/bin/bash
# tessera-serve under load (docs/inference.md), bounded and on localhost only: 32 concurrent
# streaming clients share 64 requests — no errors, every stream complete and well formed (one
# finish_reason, then [DONE]); then a client that leaves mid-stream: its generation ends early,
# its slot and cache blocks return and tensor memory is back at its idle level (GET /metrics).
# Latency figures come from bench/serve_load.sh; here they are printed only.
# Usage: serve_load.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: serve_load.sh BUILD_BIN_DIR}"
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.bash" serve_load
source "$HERE/text_model.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
LOAD="$HERE/../../bench/serve_load.mjs"

# A context of 2048 positions (RoPE), so a generation can outlast its client.
check "train a byte-level model" train_text_model "$BIN_DIR" "$TMP/model" --max-position-embeddings 2048
PORT=$(free_port)
"$BIN_DIR/tessera-serve" --load "$TMP/model" --tokenizer-type ByteLevel --port "$PORT" \
  --max-batch 32 --num-threads 1 >"$TMP/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; rm -rf "$TMP"' EXIT
URL="http://127.0.0.1:$PORT"
for _ in $(seq 1 100); do curl -s -o /dev/null "$URL/v1/models" && break; sleep 0.2; done

check "32 concurrent streaming clients, 64 requests of 32 tokens: all complete, well formed" \
  node "$LOAD" load "$URL" 32 64 32
check "a client that leaves mid-stream frees its slot, its cache blocks and its memory" \
  node "$LOAD" disconnect "$URL" 2000
check "the server still serves" bash -c "curl -sf -H 'Content-Type: application/json' \
  -d '{\"prompt\":\"document 2\",\"max_tokens\":8}' '$URL/v1/completions' >/dev/null"
kill $SERVER
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
