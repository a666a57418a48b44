// tiktoken references for tests/cli/tokenizers.sh, through js-tiktoken (an independent
// implementation of tiktoken's byte-pair encoding).
//
//   node tiktoken_js.mjs convert tokenizer.json OUTDIR
//     Turns a byte-level BPE tokenizer.json (as tessera-preprocess --train-tokenizer writes) into
//     tiktoken ranks: ranks 0..255 are the bytes in order (Megatron's rule), then the vocabulary's
//     other tokens by id (special tokens left out). Writes OUTDIR/ranks.tiktoken (tiktoken's
//     "<base64> <rank>" lines) and OUTDIR/ranks.json (Megatron's list of
//     {rank, token_bytes, token_str}).
//   NODE_PATH=DIR/node_modules node tiktoken_js.mjs encode ranks.tiktoken v1|v2|llama3 OFFSET BOS
//     Encodes each hex-encoded line of stdin and prints the ids + OFFSET (Megatron's special
//     tokens come first), with BOS first unless it is -1; lines that are not valid UTF-8 print
//     "skip".
// The patterns are Megatron's PATTERN_TIKTOKEN / PATTERN_TIKTOKEN_V2 and Llama 3's, rewritten
// for JavaScript, which lacks two of their constructs: v1's possessive quantifiers ?+ and ++
// become greedy ones (the same matches here: what follows them cannot match what they gave
// back), and Llama 3's (?i:'s|'t|...) is spelt out with ASCII case classes.
import { createRequire } from "module";
import { readFileSync, writeFileSync } from "fs";

const PATTERNS = {
  v1: String.raw`[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`,
  v2:
    String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|` +
    String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|` +
    String.raw`\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
  llama3:
    String.raw`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|` +
    String.raw`[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
};

// GPT-2's bytes_to_unicode, inverted: byte-level character -> byte.
function charToByte() {
  const bs = [];
  for (let b = 33; b <= 126; ++b) bs.push(b);
  for (let b = 161; b <= 172; ++b) bs.push(b);
  for (let b = 174; b <= 255; ++b) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; ++b)
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  const map = new Map();
  bs.forEach((b, i) => map.set(String.fromCodePoint(cs[i]), b));
  return map;
}

if (process.argv[2] === "convert") {
  const j = JSON.parse(readFileSync(process.argv[3], "utf8"));
  const special = new Set((j.added_tokens || []).map((t) => t.content));
  const toByte = charToByte();
  const ranks = [];
  for (let b = 0; b < 256; ++b) ranks.push(Buffer.from([b]));
  const rest = Object.entries(j.model.vocab)
    .filter(([t]) => !special.has(t))
    .sort((a, b) => a[1] - b[1])
    .map(([t]) => Buffer.from([...t].map((c) => toByte.get(c))))
    .filter((bytes) => bytes.length > 1);
  ranks.push(...rest);
  const dir = process.argv[4];
  writeFileSync(`${dir}/ranks.tiktoken`, ranks.map((r, i) => `${r.toString("base64")} ${i}\n`).join(""));
  writeFileSync(
    `${dir}/ranks.json`,
    JSON.stringify(ranks.map((r, i) => ({ rank: i, token_bytes: r.toString("base64"), token_str: "" }))),
  );
} else {
  const require = createRequire(process.env.NODE_PATH + "/");
  const { Tiktoken } = require("js-tiktoken/lite");
  const [, , , ranksFile, patternName, offsetText, bosText] = process.argv;
  const offset = Number(offsetText);
  const bos = Number(bosText);
  // js-tiktoken's rank format: lines "! FIRST_RANK TOKEN..." (tokens in base64).
  const bpe = readFileSync(ranksFile, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => {
      const [tok, rank] = l.split(" ");
      return `! ${rank} ${tok}`;
    })
    .join("\n");
  const enc = new Tiktoken({ pat_str: PATTERNS[patternName], special_tokens: {}, bpe_ranks: bpe });
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
    const ids = enc.encode(text).map((id) => id + offset);
    out.push((bos >= 0 ? [bos, ...ids] : ids).join(" "));
  }
  process.stdout.write(out.map((l) => l + "\n").join(""));
}
