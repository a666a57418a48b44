#!/bin/bash
# tessera-serve under load (docs/inference.md "Server under load"): a server on localhost for a
# model directory, CLIENTS concurrent streaming clients sharing REQUESTS completions of
# MAX_TOKENS tokens each (bench/serve_load.mjs); prints time to first token, time per output
# token and inter-token latency (p50, p99) and the output rate, beside the single-stream decode
# rate of the same server measured in the same run (one client, one request at a time).
# MODEL is a model directory (a checkpoint or a Hugging Face directory with its tokenizer), or a
# preset name (gpt2-124m, llama-1b, ...): then a checkpoint of that shape with a byte-level
# vocabulary (257) is made by one training step on --mock-data, which is as fast to serve as the
# trained model (its text is noise).
# Usage: bench/serve_load.sh MODEL [BUILD_BIN_DIR] [CLIENTS] [REQUESTS] [MAX_TOKENS] [server flags...]
set -euo pipefail
MODEL="${1:?usage: serve_load.sh MODEL [BUILD_BIN_DIR] [CLIENTS] [REQUESTS] [MAX_TOKENS] [flags]}"
BIN_DIR="${2:-build/bin}"
CLIENTS="${3:-32}"
REQUESTS="${4:-128}"
MAX_TOKENS="${5:-64}"
shift $(($# < 5 ? $# : 5))
HERE="$(cd "$(dirname "$0")" && pwd)"
lscpu | grep -E "^Model name" || true
PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
WORK=$(mktemp -d)
SERVER=
trap '[ -n "$SERVER" ] && kill $SERVER 2>/dev/null; rm -rf "$WORK"' EXIT
if [ ! -d "$MODEL" ]; then
  echo "making a $MODEL checkpoint (one step on --mock-data, byte-level vocabulary)"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 1 \
    "$BIN_DIR/tessera-train" --model "$MODEL" --vocab-size 257 --mock-data --seq-length 128 \
    --train-iters 1 --micro-batch-size 1 --global-batch-size 1 --lr 1e-4 --eval-interval 0 \
    --save "$WORK/model" --save-interval 1 >"$WORK/train.log" 2>&1 || { cat "$WORK/train.log"; exit 1; }
  MODEL="$WORK/model"
  set -- --tokenizer-type ByteLevel "$@"
fi
"$BIN_DIR/tessera-serve" --load "$MODEL" --port "$PORT" --max-batch "$CLIENTS" "$@" >"$WORK/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 300); do curl -s -o /dev/null "http://127.0.0.1:$PORT/v1/models" && break; sleep 0.2; done
curl -s -o /dev/null "http://127.0.0.1:$PORT/v1/models" || { cat "$WORK/server.log"; exit 1; }
echo "one client (the single-stream reference):"
node "$HERE/serve_load.mjs" load "http://127.0.0.1:$PORT" 1 4 "$MAX_TOKENS"
echo "$CLIENTS clients:"
node "$HERE/serve_load.mjs" load "http://127.0.0.1:$PORT" "$CLIENTS" "$REQUESTS" "$MAX_TOKENS"
