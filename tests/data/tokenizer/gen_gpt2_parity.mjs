// Writes gpt2_parity.tsv: GPT-2 token ids of a varied sample, from an independent reference
// (js-tiktoken's "gpt2" encoding, cross-checked against gpt-3-encoder's BPE where the text is
// valid UTF-8). Regenerate with:
//   mkdir -p /tmp/ref && cd /tmp/ref && npm install gpt-3-encoder@1.1.4 js-tiktoken@1.0.21 &&
//   NODE_PATH=/tmp/ref/node_modules node /path/to/tests/data/tokenizer/gen_gpt2_parity.mjs \
//     > /path/to/tests/data/tokenizer/gpt2_parity.tsv
// Each line: the input's bytes in hex, a tab, the ids separated by spaces.
// With --hex, encodes each hex-encoded line of stdin instead and prints its ids (the CLI test
// uses this on English paragraphs): NODE_PATH=... node gen_gpt2_parity.mjs --hex < in.hex
// Invalid UTF-8 is handled as GPT-2's Python code would with surrogateescape decoding: each
// invalid byte becomes one lone surrogate (U+DC80 + byte), a symbol (neither \s, \p{L} nor
// \p{N}) for the regex, and goes back to its raw byte before the byte-level BPE. JavaScript
// regexes differ from Python's `regex` in two code points (JS \s holds U+FEFF but not U+0085),
// so neither appears below.
import { createRequire } from "module";
const require = createRequire(process.env.NODE_PATH + "/");
const { getEncoding } = require("js-tiktoken");
const gpt3 = require("gpt-3-encoder");

const enc = getEncoding("gpt2");
// surrogateescape: lone surrogates U+DC80..U+DCFF are the raw bytes 0x80..0xFF.
const utf8 = new TextEncoder();
enc.textEncoder = {
  encode(s) {
    const out = [];
    for (const ch of s) {
      const cp = ch.codePointAt(0);
      if (cp >= 0xdc80 && cp <= 0xdcff) out.push(cp - 0xdc00);
      else out.push(...utf8.encode(ch));
    }
    return Uint8Array.from(out);
  },
};

// Bytes to a JS string, invalid UTF-8 bytes as lone surrogates (Python's surrogateescape).
function decodeEscape(bytes) {
  let s = "";
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i];
    let n = b < 0x80 ? 1 : b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
    let ok = n > 0 && i + n <= bytes.length;
    for (let k = 1; ok && k < n; ++k) ok = (bytes[i + k] & 0xc0) === 0x80;
    if (ok && n > 1) {
      let cp = b & (0xff >> (n + 1));
      for (let k = 1; k < n; ++k) cp = (cp << 6) | (bytes[i + k] & 0x3f);
      const min = [0, 0, 0x80, 0x800, 0x10000][n];
      ok = cp >= min && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
      if (ok) { s += String.fromCodePoint(cp); i += n; continue; }
    }
    if (n === 1) { s += String.fromCharCode(b); i += 1; continue; }
    s += String.fromCharCode(0xdc00 + b);
    i += 1;
  }
  return s;
}

const texts = [
  "Hello world",
  "The quick brown fox jumps over the lazy dog.",
  "I'm sure you've heard they'll say it's what we'd do, don't you? I'M SHOUTING'S",
  "Numbers: 3.14159, 2,718,281 and 1234567890 or ١٢٣ and Ⅻ.",
  "  leading spaces, trailing spaces   ",
  "tabs\there\t\tand\n\nnewlines\n\n\n  \n mixed \r\n\r\nCRLF",
  "many     spaces    between",
  "end with newline\n",
  "\n\n\n",
  " ",
  "",
  "日本語のテキストです。中文文本，还有标点符号！",
  "한국어 텍스트도 있습니다",
  "Emoji: 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷 and ❤️ 🤖",
  "مرحبا بالعالم! هذا نص عربي.",
  "Ünïcödé àccents and combining: e\u0301 a\u0308 n\u0303 Z\u0351\u0348",
  "Ελληνικά και русский текст, עִבְרִית",
  "code: def f(x):\n    return x**2  # comment\n\tif (a&&b) { c->d(); }",
  "punctuation!!! ??? ... --- *** $$$ @@@ ### %%% ^^^",
  "URLs http://example.com/path?q=1&r=2 and emails a.b@c.de",
  "\u00a0non-breaking\u00a0spaces\u2003em\u3000ideographic\u2028line\u2029para",
  "mixed123abc 456def ghi789 12ab34",
  "'s 's's ''' 'll've 're",
  "अनुच्छेद हिन्दी में ภาษาไทย",
  "\u0000\u0001 control \u001b[0m chars \u007f",
];
const rawCases = [
  [0x66, 0x6f, 0x6f, 0xff, 0x62, 0x61, 0x72],                    // foo\xffbar
  [0x20, 0x80, 0x81, 0x20, 0x61],                                // lone continuation bytes
  [0xe2, 0x82, 0x20, 0x78, 0xc3],                                // truncated sequences
  [0xed, 0xa0, 0x80, 0x21, 0xc0, 0xaf, 0x3f],                    // surrogate, overlong
  [0x48, 0x69, 0x21, 0xf5, 0xfe, 0x0a, 0x0a, 0xf0, 0x9f, 0x98],  // invalid lead bytes
];

const hex = (bytes) => Buffer.from(bytes).toString("hex");
if (process.argv[2] === "--hex") {
  const { readFileSync } = await import("fs");
  const out = readFileSync(0, "utf8").split("\n").slice(0, -1)
    .map((line) => enc.encode(decodeEscape(Array.from(Buffer.from(line, "hex")))).join(" "));
  process.stdout.write(out.map((l) => l + "\n").join(""));
  process.exit(0);
}
const lines = [];
for (const t of texts) {
  const bytes = Array.from(utf8.encode(t));
  const ids = enc.encode(decodeEscape(bytes));
  const other = gpt3.encode(t);
  if (ids.join(" ") !== other.join(" ")) console.error("js-tiktoken and gpt-3-encoder differ on", JSON.stringify(t));
  lines.push(hex(bytes) + "\t" + ids.join(" "));
}
for (const bytes of rawCases) lines.push(hex(bytes) + "\t" + enc.encode(decodeEscape(bytes)).join(" "));
process.stdout.write(lines.join("\n") + "\n");
