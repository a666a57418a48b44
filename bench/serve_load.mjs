// A load generator for tessera-serve (bench/serve_load.sh, tests/cli/serve_load.sh), on Node's
// own fetch: no dependencies.
//
//   node serve_load.mjs load URL CLIENTS REQUESTS MAX_TOKENS
//     CLIENTS concurrent clients share REQUESTS streaming /v1/completions requests (each asks
//     for MAX_TOKENS tokens with ignore_eos, so every answer has that length). Every stream must
//     be well formed: "data: {json}" events of object text_completion, one finish_reason
//     ("length") on the last, then "data: [DONE]". Prints one JSON line with the counts and the
//     latencies as vLLM's benchmark_serving defines them: TTFT (request sent to first text),
//     TPOT ((last text - first text) / (tokens - 1)), ITL (between successive text events).
//   node serve_load.mjs disconnect URL MAX_TOKENS
//     One streaming request whose client leaves after its first text; then GET /metrics until
//     the server is idle again: no request running, every KV-cache block free, one more request
//     aborted, tensor memory back at its level before the request (but for kernel scratch,
//     which keeps its largest size).
// Exit code 1 when a check fails (each failure printed), 0 otherwise.
const [mode, url, ...rest] = process.argv.slice(2);
const prompt = "document 1 says";

function fail(what) {
  console.error("FAIL: " + what);
  process.exitCode = 1;
}

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

// The server-sent events of a streaming response as they arrive: calls onEvent(data) per event.
async function readEvents(response, onEvent) {
  const decoder = new TextDecoder();
  let buffered = "";
  for await (const bytes of response.body) {
    buffered += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const event = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      if (!event.startsWith("data: ")) throw new Error("not a data event: " + JSON.stringify(event));
      if (onEvent(event.slice(6)) === false) return false;
    }
  }
  if (buffered.length > 0) throw new Error("a partial event at the end: " + JSON.stringify(buffered));
  return true;
}

// One streaming completion; its timings, or an exception naming what was wrong.
async function streamedCompletion(maxTokens, seed) {
  const sent = performance.now();
  const response = await fetch(url + "/v1/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0.8, seed, stream: true,
                           ignore_eos: true }),
  });
  if (response.status !== 200) throw new Error(`HTTP ${response.status}: ${await response.text()}`);
  const times = [];
  let text = "", finish = null, done = false;
  await readEvents(response, (data) => {
    if (done) throw new Error("an event after [DONE]");
    if (data === "[DONE]") {
      done = true;
      return;
    }
    const chunk = JSON.parse(data);
    if (chunk.object !== "text_completion" || chunk.choices.length !== 1)
      throw new Error("not a completion chunk: " + data);
    if (finish !== null) throw new Error("a chunk after the finish_reason");
    const choice = chunk.choices[0];
    if (choice.text.length > 0) {
      times.push(performance.now());
      text += choice.text;
    }
    finish = choice.finish_reason;
  });
  if (!done) throw new Error("no [DONE]");
  if (finish !== "length") throw new Error("finish_reason " + finish + ", expected length");
  if (times.length === 0) throw new Error("no text");
  return { sent, times, end: performance.now(), text };
}

async function load(clients, requests, maxTokens) {
  let next = 0, errors = 0, tokens = 0;
  const ttft = [], tpot = [], itl = [];
  const started = performance.now();
  const client = async () => {
    for (let r; (r = next++) < requests;) {
      try {
        const c = await streamedCompletion(maxTokens, 1000 + r);
        ttft.push(c.times[0] - c.sent);
        if (maxTokens > 1) tpot.push((c.times[c.times.length - 1] - c.times[0]) / (maxTokens - 1));
        for (let i = 1; i < c.times.length; ++i) itl.push(c.times[i] - c.times[i - 1]);
        tokens += maxTokens;
      } catch (e) {
        ++errors;
        fail(`request ${r}: ${e.message}`);
      }
    }
  };
  await Promise.all(Array.from({ length: clients }, client));
  const seconds = (performance.now() - started) / 1000;
  for (const a of [ttft, tpot, itl]) a.sort((x, y) => x - y);
  const ms = (x) => Math.round(x * 100) / 100;
  console.log(JSON.stringify({
    clients, requests, max_tokens: maxTokens, completed: ttft.length, errors,
    seconds: ms(seconds), output_tokens_per_s: ms(tokens / seconds),
    ttft_ms: { p50: ms(percentile(ttft, 50)), p99: ms(percentile(ttft, 99)) },
    tpot_ms: { p50: ms(percentile(tpot, 50)), p99: ms(percentile(tpot, 99)) },
    itl_ms: { p50: ms(percentile(itl, 50)), p99: ms(percentile(itl, 99)) },
  }));
  if (ttft.length !== requests) fail(`${ttft.length} of ${requests} requests completed`);
}

// GET /metrics as {name or name{labels}: value}, the model_name label left out.
async function metrics() {
  const text = await (await fetch(url + "/metrics")).text();
  const out = {};
  for (const line of text.split("\n")) {
    if (line.startsWith("#") || line.length === 0) continue;
    const m = line.match(/^([^{ ]+)\{model_name="(?:[^"\\]|\\.)*"(?:,([^}]*))?\} (\S+)$/);
    if (!m) throw new Error("not a metrics line: " + line);
    out[m[2] ? `${m[1]}{${m[2]}}` : m[1]] = Number(m[3]);
  }
  return out;
}

// Tensor memory but the "other" category: per-thread kernel scratch (kernels/scratch.h) keeps
// the size of the largest call by design, so a longer generation than any before may grow it.
function tensorBytes(m) {
  return Object.entries(m)
    .filter(([k]) => k.startsWith("tessera:memory_bytes{") && !k.includes('category="other"'))
    .reduce((sum, [, v]) => sum + v, 0);
}

async function disconnect(maxTokens) {
  const before = await metrics();
  const controller = new AbortController();
  const response = await fetch(url + "/v1/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0.8, seed: 3, stream: true,
                           ignore_eos: true }),
    signal: controller.signal,
  });
  let pieces = 0;
  try {
    await readEvents(response, (data) => {
      const chunk = JSON.parse(data);
      if (chunk.choices[0].text.length > 0 && ++pieces === 1) {
        controller.abort();  // the client leaves mid-stream
        return false;
      }
    });
  } catch (e) {
    if (e.name !== "AbortError") throw e;
  }
  if (pieces !== 1) fail("the stream gave no text before the client left");
  let now;
  const deadline = performance.now() + 20000;
  for (;;) {
    now = await metrics();
    const idle = now["tessera:num_requests_running"] === 0 &&
                 now["tessera:kv_cache_free_blocks"] === now["tessera:kv_cache_blocks"] &&
                 now["tessera:request_aborted_total"] === before["tessera:request_aborted_total"] + 1;
    if (idle || performance.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const generated = now["tessera:generation_tokens_total"] - before["tessera:generation_tokens_total"];
  console.log(JSON.stringify({
    running: now["tessera:num_requests_running"],
    free_blocks: now["tessera:kv_cache_free_blocks"], blocks: now["tessera:kv_cache_blocks"],
    aborted: now["tessera:request_aborted_total"] - before["tessera:request_aborted_total"],
    generated_before_abort: generated, max_tokens: maxTokens,
    tensor_bytes_before: tensorBytes(before), tensor_bytes_after: tensorBytes(now),
  }));
  if (now["tessera:num_requests_running"] !== 0) fail("a request still runs");
  if (now["tessera:kv_cache_free_blocks"] !== now["tessera:kv_cache_blocks"])
    fail("cache blocks were not given back");
  if (now["tessera:request_aborted_total"] !== before["tessera:request_aborted_total"] + 1)
    fail("the request was not counted as aborted");
  if (!(generated < maxTokens)) fail(`it generated ${generated} of ${maxTokens} tokens: not ended early`);
  if (tensorBytes(now) !== tensorBytes(before))
    fail(`tensor memory ${tensorBytes(now)} bytes, ${tensorBytes(before)} before the request`);
}

if (mode === "load") await load(Number(rest[0]), Number(rest[1]), Number(rest[2]));
else if (mode === "disconnect") await disconnect(Number(rest[0]));
else fail("usage: serve_load.mjs load URL CLIENTS REQUESTS MAX_TOKENS | disconnect URL MAX_TOKENS");
