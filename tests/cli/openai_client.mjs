// The official `openai` npm client against tessera-serve (tests/cli/serve.sh): completions and
// chat completions, streamed and not, greedy; a stream's pieces must add up to the same
// request's whole answer. Usage: node openai_client.mjs NODE_MODULES BASE_URL MODEL
import { createRequire } from "node:module";

const [modules, baseURL, model] = process.argv.slice(2);
const require = createRequire(modules + "/");
const OpenAI = require("openai");
const client = new OpenAI({ apiKey: "unused", baseURL });

function check(ok, what) {
  if (!ok) {
    console.error("FAIL: " + what);
    process.exitCode = 1;
  }
}

const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === model, "models.list names the model");

const args = { model, prompt: "document 1", max_tokens: 24, temperature: 0 };
const whole = await client.completions.create(args);
const text = whole.choices[0].text;
check(text.length > 0, "a completion's text");
check(whole.usage.prompt_tokens === 10 && whole.usage.completion_tokens > 0, "usage counts");
let streamed = "";
for await (const chunk of await client.completions.create({ ...args, stream: true }))
  streamed += chunk.choices[0]?.text ?? "";
check(streamed === text, `a streamed completion adds up to the same text (${JSON.stringify(streamed)} vs ${JSON.stringify(text)})`);

const chatArgs = { model, messages: [{ role: "user", content: "document 2" }], max_tokens: 24, temperature: 0 };
const chat = await client.chat.completions.create(chatArgs);
const reply = chat.choices[0].message.content;
check(chat.choices[0].message.role === "assistant" && reply.length > 0, "a chat answer");
check(["stop", "length"].includes(chat.choices[0].finish_reason), "its finish_reason");
let deltas = "";
for await (const chunk of await client.chat.completions.create({ ...chatArgs, stream: true }))
  deltas += chunk.choices[0]?.delta?.content ?? "";
check(deltas === reply, "a streamed chat answer adds up to the same text");

try {
  await client.completions.create({ ...args, max_tokens: -1 });
  check(false, "max_tokens -1 refused");
} catch (e) {
  check(e.status === 400, `max_tokens -1: HTTP 400 (got ${e.status})`);
}
console.log(`openai client: completion ${JSON.stringify(text)}, chat ${JSON.stringify(reply)}`);
