// Writes LLaMA-3, Qwen-2 and Digits style variants of a byte-level BPE tokenizer.json (same
// vocabulary and merges, other normalizer / pre-tokenizer settings), for comparing tessera's
// loader with tokenizers.js on each. Usage: node hf_variants.mjs tokenizer.json OUT_DIR
import { readFileSync, writeFileSync } from "fs";

const base = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = process.argv[3];
const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false };
const split = (regex) => ({ type: "Split", pattern: { Regex: regex }, behavior: "Isolated", invert: false });
const llama3 =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const qwen =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const variant = (name, edit) => {
  const j = structuredClone(base);
  edit(j);
  writeFileSync(`${out}/${name}.json`, JSON.stringify(j));
};
variant("llama3", (j) => {
  j.pre_tokenizer = { type: "Sequence", pretokenizers: [split(llama3), byteLevel] };
  j.model.ignore_merges = true;
  j.added_tokens.push({ id: j.added_tokens[0].id + 1, content: "<|eot_id|>", single_word: false,
                        lstrip: false, rstrip: false, normalized: false, special: true });
});
variant("qwen", (j) => {
  j.normalizer = { type: "NFC" };
  j.pre_tokenizer = { type: "Sequence", pretokenizers: [split(qwen), byteLevel] };
});
variant("digits", (j) => {
  j.pre_tokenizer = { type: "Sequence", pretokenizers: [{ type: "Digits", individual_digits: true },
                                                        { type: "ByteLevel", add_prefix_space: true, use_regex: true }] };
});

// LLaMA-2 style (metaspace + byte_fallback) from the same merges: byte-level tokens turned back
// into text with "▁" for spaces; tokens that are not valid UTF-8 and merges that lose a side
// are dropped; <unk>, <s>, </s> and the 256 <0xXX> byte tokens come first.
const byteOf = new Map();
{
  let extra = 256;
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    byteOf.set(String.fromCodePoint(printable ? b : extra++), b);
  }
}
const utf8 = new TextDecoder("utf-8", { fatal: true });
const toText = (tok) => {
  try {
    return utf8.decode(Uint8Array.from([...tok].map((c) => byteOf.get(c)))).replaceAll(" ", "\u2581");
  } catch {
    return null;
  }
};
const vocab = { "<unk>": 0, "<s>": 1, "</s>": 2 };
for (let b = 0; b < 256; ++b) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`] = 3 + b;
let next = 259;
for (const tok of Object.keys(base.model.vocab)) {
  const t = toText(tok);
  if (t !== null && t !== "" && !(t in vocab) && byteOf.has(tok[0])) vocab[t] = next++;
}
const merges = [];
for (const m of base.model.merges) {
  const [l, r] = (typeof m === "string" ? m.split(" ") : m).map(toText);
  if (l && r && l in vocab && r in vocab && l + r in vocab) merges.push(`${l} ${r}`);
}
const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false,
                                    normalized: false, special: true });
const llama2 = (normalizer, preTokenizer, decoder) => ({
  version: "1.0", truncation: null, padding: null,
  added_tokens: [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
  normalizer, pre_tokenizer: preTokenizer, post_processor: null, decoder,
  model: { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null,
           end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, ignore_merges: false,
           vocab, merges },
});
const legacyDecoder = { type: "Sequence", decoders: [
  { type: "Replace", pattern: { String: "\u2581" }, content: " " }, { type: "ByteFallback" },
  { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 0 }] };
writeFileSync(`${out}/llama2.json`, JSON.stringify(llama2(
  { type: "Sequence", normalizers: [{ type: "Prepend", prepend: "\u2581" },
                                    { type: "Replace", pattern: { String: " " }, content: "\u2581" }] },
  null, legacyDecoder)));
writeFileSync(`${out}/llama2_metaspace.json`, JSON.stringify(llama2(
  null, { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false },
  { type: "Sequence", decoders: [{ type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false },
                                 { type: "ByteFallback" }, { type: "Fuse" }] })));
