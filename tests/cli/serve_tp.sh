#!/bin/bash
# tessera-serve under tensor parallelism (docs/inference.md): `mpirun -np N tessera-serve`
# (N = 2 and 4; rank 0 serves, every rank decodes its shard) answers as one process does — the
# same greedy text, the same text for a seeded sampled request — serves concurrent streaming
# requests, and when rank 0 cannot listen every rank exits with code 2 after one line.
# Usage: serve_tp.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: serve_tp.sh BUILD_BIN_DIR}"
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.bash" serve_tp
source "$HERE/text_model.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

check "train a byte-level model" train_text_model "$BIN_DIR" "$TMP/model"
SERVERS=()
trap 'kill "${SERVERS[@]}" 2>/dev/null; wait; rm -rf "$TMP"' EXIT
# start NP PORT: a server on PORT (NP ranks; 1 without mpirun), up when this returns.
start() {
  local np="$1" port="$2"
  if [ "$np" = 1 ]; then
    "$BIN_DIR/tessera-serve" --load "$TMP/model" --tokenizer-type ByteLevel --port "$port" \
      --served-model-name tiny >"$TMP/server$np.log" 2>&1 &
  else
    mpirun --oversubscribe -np "$np" "$BIN_DIR/tessera-serve" --load "$TMP/model" \
      --tokenizer-type ByteLevel --port "$port" --served-model-name tiny >"$TMP/server$np.log" 2>&1 &
  fi
  SERVERS+=($!)
  for _ in $(seq 1 150); do curl -s -o /dev/null "http://127.0.0.1:$port/v1/models" && return 0; sleep 0.2; done
  echo "  the server with $np ranks did not come up: $(cat "$TMP/server$np.log")" >&2
  return 1
}
# completion PORT BODY: the text of a completion.
completion() {
  curl -sf -H 'Content-Type: application/json' -d "$2" "http://127.0.0.1:$1/v1/completions" |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["choices"][0]["text"])'
}
GREEDY='{"prompt":"document 4","max_tokens":40,"temperature":0}'
SAMPLED='{"prompt":"document 7 says","max_tokens":40,"temperature":0.9,"top_p":0.95,"seed":11,"ignore_eos":true}'

ONE=$(free_port)
check "one process serves" start 1 "$ONE"
greedy=$(completion "$ONE" "$GREEDY")
sampled=$(completion "$ONE" "$SAMPLED")
check "  a greedy and a sampled answer" test -n "$greedy" -a -n "$sampled"
for np in 2 4; do
  port=$(free_port)
  check "$np ranks serve" start "$np" "$port"
  check "  the same greedy text" test "$(completion "$port" "$GREEDY")" = "$greedy"
  check "  the same seeded sampled text" test "$(completion "$port" "$SAMPLED")" = "$sampled"
  check "  16 streaming requests from 8 clients, all complete and well formed" \
    node "$HERE/../../bench/serve_load.mjs" load "http://127.0.0.1:$port" 8 16 20
  check "  and then the greedy text again" test "$(completion "$port" "$GREEDY")" = "$greedy"
done
# 16 load requests and the sampled one ran to their length (the greedy ones may stop at EOD).
check "metrics count the requests" bash -c "curl -sf http://127.0.0.1:$port/metrics | grep -qE \
  '^tessera:request_success_total\{model_name=\"tiny\",finished_reason=\"length\"\} (1[7-9]|20)$'"

# Rank 0 cannot listen (the port is taken): every rank ends, exit code 2, one line.
timeout 120 mpirun --oversubscribe -np 2 "$BIN_DIR/tessera-serve" --load "$TMP/model" \
  --tokenizer-type ByteLevel --port "$ONE" >"$TMP/busy.out" 2>"$TMP/busy.err"
code=$?
check "a taken port under mpirun: exit code 2" test "$code" = 2
check "  with one line naming the port" test "$(grep -c "port $ONE: cannot listen" "$TMP/busy.err")" = 1

kill "${SERVERS[@]}" 2>/dev/null
wait
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
