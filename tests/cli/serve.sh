#!/bin/bash
# tessera-serve (docs/inference.md) on a byte-level model trained here:
#  - the official `openai` npm client (installed by scripts/fetch_npm.sh): the model list,
#    completions and chat completions, streamed (Server-Sent Events) and not, their pieces adding
#    up to the whole answer; a bad request is HTTP 400;
#  - curl: a greedy completion's text is tessera-generate's for the same prompt; the stream ends
#    with "data: [DONE]"; Megatron's PUT /api returns the prompt and its continuation, and
#    refuses top_k with top_p;
#  - bad input: malformed JSON, wrong types, negative or huge max_tokens, a prompt longer than
#    the context, an unknown model, and 500 fuzzed bodies: each a 400 (or a valid answer), never
#    a 5xx, and the server still serves after them.
# Usage: serve.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: serve.sh BUILD_BIN_DIR}"
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.bash" serve
source "$HERE/text_model.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

check "train a byte-level model" train_text_model "$BIN_DIR" "$TMP/model"
PORT=$(free_port)
"$BIN_DIR/tessera-serve" --load "$TMP/model" --tokenizer-type ByteLevel --port "$PORT" \
  --served-model-name tiny >"$TMP/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; rm -rf "$TMP"' EXIT
URL="http://127.0.0.1:$PORT"
for _ in $(seq 1 100); do curl -s -o /dev/null "$URL/v1/models" && break; sleep 0.2; done
check "the server answers /v1/models" bash -c "curl -sf '$URL/v1/models' | grep -q '\"id\":\"tiny\"'"

# status METHOD PATH BODY: the HTTP status; the body in $TMP/body.
status() {
  curl -s -o "$TMP/body" -w '%{http_code}' -X "$1" -H 'Content-Type: application/json' \
    --data-binary "$3" "$URL$2"
}
json_field() { /usr/bin/python3 -c 'import json, sys; print(eval("json.load(open(sys.argv[1]))" + sys.argv[2]))' "$TMP/body" "$1"; }

check "a greedy completion" test "$(status POST /v1/completions \
  '{"model":"tiny","prompt":"document 1","max_tokens":24,"temperature":0}')" = 200
served=$(json_field '["choices"][0]["text"]')
check "  is tessera-generate's text" bash -c "\"$BIN_DIR/tessera-generate\" --load \"$TMP/model\" \
  --tokenizer-type ByteLevel --prompt 'document 1' --max-tokens 24 --temperature 0 --json \
  | grep -qF '\"text\":\"$served\"'"
check "a streamed completion" bash -c "curl -sN -H 'Content-Type: application/json' \
  -d '{\"prompt\":\"document 1\",\"max_tokens\":24,\"temperature\":0,\"stream\":true}' \
  '$URL/v1/completions' >'$TMP/sse'"
check "  adds up to the same text and ends with [DONE]" /usr/bin/python3 -c 'import json, sys
lines = [l for l in open(sys.argv[1]).read().split("\n") if l]
assert lines[-1] == "data: [DONE]", lines[-1]
text = "".join(json.loads(l[6:])["choices"][0]["text"] for l in lines[:-1])
assert text == sys.argv[2], (text, sys.argv[2])' "$TMP/sse" "$served"
check "Megatron's PUT /api" test "$(status PUT /api \
  '{"prompts":["document 1"],"tokens_to_generate":24,"top_k":1,"logprobs":true}')" = 200
check "  the prompt and its greedy continuation, with logprobs" test \
  "$(json_field '["text"][0]')" = "document 1$served" -a "$(json_field '["logprobs"][0][0] < 0')" = True
check "  top_k with top_p is refused" test "$(status PUT /api \
  '{"prompts":["a"],"top_k":5,"top_p":0.9}')" = 400

bad() {  # bad NAME METHOD PATH BODY PARAM: a 400 naming PARAM
  local code
  code=$(status "$2" "$3" "$4")
  [ "$code" = 400 ] && grep -q "\"param\":${5}" "$TMP/body" || {
    echo "  $1: HTTP $code: $(cat "$TMP/body")" >&2
    return 1
  }
}
check "malformed JSON" bad json POST /v1/completions '{"prompt": "a",' null
check "a wrong type" bad type POST /v1/completions '{"prompt":"a","temperature":"hot"}' '"temperature"'
check "negative max_tokens" bad neg POST /v1/completions '{"prompt":"a","max_tokens":-1}' '"max_tokens"'
check "huge max_tokens" bad huge POST /v1/completions '{"prompt":"a","max_tokens":1e30}' '"max_tokens"'
check "a prompt longer than the context" bad long POST /v1/completions \
  "{\"prompt\":\"$(printf 'x%.0s' $(seq 1 80))\"}" '"prompt"'
check "an unknown model" bad model POST /v1/completions '{"model":"gpt-9","prompt":"a"}' '"model"'
check "chat without messages" bad chat POST /v1/chat/completions '{"model":"tiny"}' '"messages"'
check "500 fuzzed bodies: 400s or answers, never a 5xx" /usr/bin/python3 - "$URL" <<'PY'
import json, random, sys, urllib.request, urllib.error
random.seed(5)
base = {"prompt": "document 3", "max_tokens": 4, "temperature": 0.5, "top_p": 0.9, "stop": ["x"],
        "messages": [{"role": "user", "content": "hi"}], "prompts": ["a"], "stream": False}
values = [None, -1, 0, 1e308, "x", "", [], {}, [1, "a"], True, 2**63, -2**63, "\udcff", 3.5]
codes = {}
for i in range(500):
    body = dict(base)
    for _ in range(random.randint(1, 3)):
        body[random.choice(list(base) + ["n", "seed", "logprobs", "top_k", "min_p"])] = random.choice(values)
    data = json.dumps(body, ensure_ascii=False).encode("utf-8", "replace")
    if i % 5 == 0:  # broken bytes
        data = data[: random.randint(0, len(data))] + bytes(random.randint(0, 255) for _ in range(3))
    path = random.choice(["/v1/completions", "/v1/chat/completions", "/api"])
    req = urllib.request.Request(sys.argv[1] + path, data=data, method="PUT" if path == "/api" else "POST",
                                 headers={"Content-Type": "application/json"})
    try:
        code = urllib.request.urlopen(req, timeout=60).status
    except urllib.error.HTTPError as e:
        code = e.code
    codes[code] = codes.get(code, 0) + 1
print("  fuzz: HTTP status counts", codes)
sys.exit(0 if set(codes) <= {200, 400} else 1)
PY
check "the server still serves" bash -c "curl -sf '$URL/v1/models' >/dev/null"

# The model directory's chat template (tokenizer_config.json: ChatML's shape with short markers,
# the test model's context being 64 tokens, refusing a late system message): a chat prompt is the template's rendering by Jinja2 itself (byte-level:
# one token a byte), and the template's raise_exception is a 400 naming "messages".
mkdir -p "$TMP/chat_model" && ln -s "$TMP/model"/* "$TMP/chat_model/"
/usr/bin/python3 - "$TMP/chat_model/tokenizer_config.json" <<'PY'
import json, sys
template = ("{% for message in messages %}{% if message['role'] == 'system' and not loop.first %}"
            "{{ raise_exception('System messages must come first') }}{% endif %}"
            "{{ '<|' + message['role'] + '\\n' + message['content'] | trim + eos_token + '\\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant\\n' }}{% endif %}")
json.dump({"chat_template": template, "eos_token": {"content": "|>"}}, open(sys.argv[1], "w"))
PY
CHAT_PORT=$(free_port)
"$BIN_DIR/tessera-serve" --load "$TMP/chat_model" --tokenizer-type ByteLevel --port "$CHAT_PORT" \
  --served-model-name tiny >"$TMP/chat_server.log" 2>&1 &
CHAT_SERVER=$!
trap 'kill $SERVER $CHAT_SERVER 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$CHAT_PORT/v1/models" && break; sleep 0.2; done
MESSAGES='[{"role":"system","content":"Be brief. "},{"role":"user","content":"doc 5 é"}]'
check "a chat prompt is the model's template rendered by Jinja2" bash -c "
  code=\$(curl -s -o '$TMP/body' -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{\"messages\":$MESSAGES,\"max_tokens\":4}' http://127.0.0.1:$CHAT_PORT/v1/chat/completions)
  [ \"\$code\" = 200 ] && /usr/bin/python3 - '$TMP/chat_model/tokenizer_config.json' '$TMP/body' '$MESSAGES' <<'PY'
import jinja2, json, sys
config = json.load(open(sys.argv[1]))
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
env.globals['raise_exception'] = lambda m: (_ for _ in ()).throw(Exception(m))
text = env.from_string(config['chat_template']).render(
    messages=json.loads(sys.argv[3]), add_generation_prompt=True, eos_token=config['eos_token']['content'])
served = json.load(open(sys.argv[2]))['usage']['prompt_tokens']
assert served == len(text.encode()), (served, len(text.encode()), text)
PY"
check "  the template's raise_exception is a 400 naming messages" bash -c "
  curl -s -o '$TMP/body' -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"b\"}]}' \
    http://127.0.0.1:$CHAT_PORT/v1/chat/completions | grep -qx 400 &&
  grep -q 'System messages must come first' '$TMP/body' && grep -q '\"param\":\"messages\"' '$TMP/body'"
check "  the server names its template at start-up" grep -q "chat template of .*tokenizer_config.json" "$TMP/chat_server.log"
kill $CHAT_SERVER

modules=$(bash "$HERE/../../scripts/fetch_npm.sh" openai@4.104.0) &&
  check "the openai npm client: completions and chat, streamed and not" \
    node "$HERE/openai_client.mjs" "$modules" "$URL/v1" tiny ||
  check "fetch the openai npm client" false

kill $SERVER
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
