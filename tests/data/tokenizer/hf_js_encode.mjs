// Encodes each hex-encoded line of stdin with Hugging Face's tokenizers.js (an independent
// implementation of tokenizer.json) and prints the ids, one line each; lines that are not valid
// UTF-8 print "skip". Usage: NODE_PATH=DIR/node_modules node hf_js_encode.mjs tokenizer.json
import { createRequire } from "module";
import { readFileSync } from "fs";
const require = createRequire(process.env.NODE_PATH + "/");
const { Tokenizer } = require("@huggingface/tokenizers");

const tok = new Tokenizer(JSON.parse(readFileSync(process.argv[2], "utf8")), {});
const decoder = new TextDecoder("utf-8", { fatal: true });
const out = [];
for (const line of readFileSync(0, "utf8").split("\n").slice(0, -1)) {
  let text;
  try {
    text = decoder.decode(Buffer.from(line, "hex"));
  } catch {
    out.push("skip");
    continue;
  }
  out.push(tok.encode(text, { add_special_tokens: false }).ids.join(" "));
}
process.stdout.write(out.map((l) => l + "\n").join(""));
