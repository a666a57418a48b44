#!/usr/bin/python3
"""An independent reference for Hugging Face model families, for tests/cli/hf_families.sh.

Nothing here calls Tessera. Safetensors files are read and written directly (8-byte
little-endian header length, JSON header, raw little-endian data), and the forward pass of the
LLaMA-shaped families is computed in float64 from the architectures' definitions as
Transformers' modeling files state them:

  - llama   (modeling_llama.py): RMSNorm (x / sqrt(mean(x^2) + eps) * w), rotate-half RoPE with
            inv_freq = 1 / theta^(2i/HD), rescaled when rope_scaling's rope_type is "llama3"
            (modeling_rope_utils.py, _compute_llama3_parameters), GQA (query head h reads
            key/value head h // (NH / KV)), causal softmax(q k^T / sqrt(HD)) v, o_proj, residual,
            SwiGLU MLP down(silu(gate(x)) * up(x)); biases on q/k/v/o with attention_bias and on
            the MLP with mlp_bias;
  - qwen2   (modeling_qwen2.py): the same with biases on q_proj, k_proj and v_proj only;
  - mistral (modeling_mistral.py, masking_utils.py): no biases, and query i attends to key j
            only if i - sliding_window < j <= i (sliding_window_overlay).
  The output layer is lm_head.weight, or the token embedding when tie_word_embeddings.

Commands:
  make FIXTURE DIR SEED     DIR/config.json = the fixture's config; DIR/model.safetensors =
                            random float32 weights with the fixture's names and shapes
  compare DIR TOKENS LOGITS TOL
                            the float64 forward of DIR on TOKENS (comma-separated) against the
                            float32 (T, vocab) file LOGITS: prints the max |difference| and
                            exits 1 above TOL; also checks that the family's distinctive part
                            (rope scaling, q/k/v biases, the window) changes the logits by far
                            more than TOL, so a forward that ignored it could not pass
  same-tensors A B          the two safetensors files hold the same names, shapes, dtypes and
                            bytes per tensor (headers may differ in layout); exits 1 otherwise
  greedy DIR PROMPT TOKENS LOGPROBS TOL
                            a greedy continuation (TOKENS after PROMPT, comma-separated ids, with
                            their log-probabilities LOGPROBS) against the float64 forward, step by
                            step: each token must be the reference's argmax (unless the two
                            differ by at most TOL in logit: a tie at fp32 precision, where the
                            check stops) and each log-probability its log-softmax within TOL
  ppl DIR TOKENS T FORMAT OUTPUT_LAYER
                            perplexity over windows of T + 1 tokens (each token after a window's
                            first predicted from those before it; TOKENS comma-separated ids) of
                            the float64 forward with the linear weights (q, k, v, o, gate, up,
                            down; lm_head too when OUTPUT_LAYER is 1) quantized in FORMAT (fp6,
                            int8, q8_0, q4; "none": as stored) by the formats' definitions written
                            out below (FP6-LLM's e3m2, llama.cpp's Q8_0 and Q4_1 rules, in float32
                            as those implementations compute), and the mean KL divergence of its
                            next-token distributions from the unquantized forward's; prints JSON
"""
import json
import math
import struct
import sys

import numpy as np

DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "F64": np.dtype("<f8")}


def read_safetensors(path):
    """name -> (dtype name, shape, raw bytes) of every tensor."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], body[begin:end])
    return out


def as_float64(dtype, shape, raw):
    if dtype == "BF16":  # the high half of a float32
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64).reshape(shape)
    return np.frombuffer(raw, dtype=DTYPES[dtype]).astype(np.float64).reshape(shape)


def load_weights(path):
    return {k: as_float64(*v) for k, v in read_safetensors(path).items()}


def write_safetensors(path, tensors):
    """tensors: ordered (name, float32 array) pairs."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, a in tensors:
        raw = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def make(fixture_path, out_dir, seed):
    with open(fixture_path) as f:
        fixture = json.load(f)
    with open(out_dir + "/config.json", "w") as f:
        json.dump(fixture["config"], f, indent=2)
    rng = np.random.default_rng(int(seed))
    tensors = []
    for name, shape in fixture["tensors"].items():
        if name.endswith("norm.weight"):  # around 1, as trained norms are
            a = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            a = 0.5 * rng.standard_normal(shape)
        elif name in ("model.embed_tokens.weight", "lm_head.weight"):
            # Logits of magnitude ~3: an fp32 forward then agrees with float64 to ~1e-6 of that.
            a = 0.1 * rng.standard_normal(shape)
        else:  # large enough that attention is far from uniform
            a = 0.2 * rng.standard_normal(shape)
        tensors.append((name, a.astype(np.float32)))
    write_safetensors(out_dir + "/model.safetensors", tensors)


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def inv_freq(config, head_dim, scaled=True):
    theta = config.get("rope_theta", 10000.0)
    f = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    rs = config.get("rope_scaling")
    if not scaled or rs is None or rs.get("rope_type", rs.get("type")) != "llama3":
        return f
    L, factor = rs["original_max_position_embeddings"], rs["factor"]
    low, high = rs["low_freq_factor"], rs["high_freq_factor"]
    out = []
    for fi in f:
        wavelen = 2 * math.pi / fi
        if wavelen > L / low:
            out.append(fi / factor)
        elif wavelen < L / high:
            out.append(fi)
        else:
            s = (L / wavelen - low) / (high - low)
            out.append((1 - s) * fi / factor + s * fi)
    return np.array(out)


def rope(x, freqs):
    """x (T, heads, HD), rotate-half: pairs (i, i + HD/2) rotated by position * freqs[i]."""
    T, half = x.shape[0], x.shape[2] // 2
    angle = np.arange(T, dtype=np.float64)[:, None] * freqs[None, :]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def forward(config, w, tokens, scaled=True, biases=True, window=True):
    """float64 logits (T, vocab). The switches turn a family's distinctive part off."""
    family = config["model_type"]
    C, NH = config["hidden_size"], config["num_attention_heads"]
    KV = config.get("num_key_value_heads", NH)
    HD = C // NH
    eps = config["rms_norm_eps"]
    T = len(tokens)
    qkv_bias = family == "qwen2" or (family == "llama" and config.get("attention_bias", False))
    o_bias = family == "llama" and config.get("attention_bias", False)
    mlp_bias = family == "llama" and config.get("mlp_bias", False)
    sw = config.get("sliding_window") if family == "mistral" else None
    if family == "qwen2" and config.get("use_sliding_window", False):
        raise SystemExit("hf_reference: Qwen2 sliding windows are not modelled here")
    freqs = inv_freq(config, HD, scaled)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    visible = j <= i
    if sw is not None and window:
        visible &= j > i - sw
    x = w["model.embed_tokens.weight"][tokens]
    for l in range(config["num_hidden_layers"]):
        p = f"model.layers.{l}."

        def linear(name, h, bias):
            y = h @ w[p + name + ".weight"].T
            return y + w[p + name + ".bias"] if bias and biases else y

        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = rope(linear("self_attn.q_proj", h, qkv_bias).reshape(T, NH, HD), freqs)
        k = rope(linear("self_attn.k_proj", h, qkv_bias).reshape(T, KV, HD), freqs)
        v = linear("self_attn.v_proj", h, qkv_bias).reshape(T, KV, HD)
        heads = []
        for hd in range(NH):
            g = hd // (NH // KV)
            s = q[:, hd, :] @ k[:, g, :].T / math.sqrt(HD)
            s = np.where(visible, s, -np.inf)
            s = np.exp(s - s.max(axis=1, keepdims=True))
            heads.append((s / s.sum(axis=1, keepdims=True)) @ v[:, g, :])
        x = x + linear("self_attn.o_proj", np.concatenate(heads, axis=1), o_bias)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = linear("mlp.gate_proj", h, mlp_bias)
        x = x + linear("mlp.down_proj", gate / (1 + np.exp(-gate)) * linear("mlp.up_proj", h, mlp_bias),
                       mlp_bias)
    x = rms_norm(x, w["model.norm.weight"], eps)
    tied = config.get("tie_word_embeddings", False)
    return x @ w["model.embed_tokens.weight" if tied else "lm_head.weight"].T


def compare(model_dir, tokens_text, logits_path, tol):
    with open(model_dir + "/config.json") as f:
        config = json.load(f)
    w = load_weights(model_dir + "/model.safetensors")
    tokens = [int(t) for t in tokens_text.split(",")]
    ref = forward(config, w, tokens)
    got = np.fromfile(logits_path, dtype="<f4").astype(np.float64).reshape(ref.shape)
    diff = float(np.max(np.abs(got - ref)))
    scale = float(np.max(np.abs(ref)))
    print(f"{config['model_type']}: max |logit| {scale:.4g}, max |tessera - reference| {diff:.3e}")
    ok = diff <= tol and scale > 1.0  # logits of order 1, or the comparison says little
    # The distinctive part of the family must matter at this size.
    off = {"mistral": dict(window=False), "qwen2": dict(biases=False)}.get(config["model_type"])
    if off is None and config.get("rope_scaling"):
        off = dict(scaled=False)
    if off is not None:
        moved = float(np.max(np.abs(forward(config, w, tokens, **off) - ref)))
        print(f"  without {list(off)[0]}: the logits move by {moved:.3e}")
        ok = ok and moved > 1000 * tol
    return 0 if ok else 1


def greedy(model_dir, prompt_text, tokens_text, logprobs_text, tol):
    with open(model_dir + "/config.json") as f:
        config = json.load(f)
    w = load_weights(model_dir + "/model.safetensors")
    seq = [int(t) for t in prompt_text.split(",")]
    tokens = [int(t) for t in tokens_text.split(",")]
    logprobs = [float(x) for x in logprobs_text.split(",")]
    margin, worst_lp = math.inf, 0.0
    for k, (tok, lp) in enumerate(zip(tokens, logprobs)):
        logits = forward(config, w, seq)[-1]
        best = int(np.argmax(logits))
        top = logits.max()
        log_softmax = logits - (top + math.log(np.exp(logits - top).sum()))
        worst_lp = max(worst_lp, abs(log_softmax[tok] - lp))
        if tok != best:
            if logits[best] - logits[tok] <= tol:
                print(f"step {k}: a tie at fp32 precision ({logits[best] - logits[tok]:.2e}); "
                      f"the check ends here")
                break
            print(f"step {k}: tessera chose {tok}, the reference {best} "
                  f"(logits {logits[tok]:.6f} and {logits[best]:.6f})")
            return 1
        second = np.partition(logits, -2)[-2]
        margin = min(margin, top - second)
        seq.append(tok)
    print(f"{k + 1} of {len(tokens)} tokens are the float64 argmax (smallest lead {margin:.3e}); "
          f"log-probabilities within {worst_lp:.3e}")
    return 0 if worst_lp <= tol and len(tokens) == len(logprobs) else 1


def same_tensors(a_path, b_path):
    a, b = read_safetensors(a_path), read_safetensors(b_path)
    if a.keys() != b.keys():
        print(f"names differ: {sorted(a.keys() ^ b.keys())}")
        return 1
    bad = [n for n in a if a[n] != b[n]]
    for n in bad:
        print(f"tensor {n} differs")
    return 1 if bad else 0


def fp6_round(y):
    """FP6 e3m2 values nearest to y (float32 array): ties away from zero, clamped to 28."""
    mags = np.array([m / 16 for m in range(4)] +
                    [(1 + m / 4) * 2.0 ** (e - 3) for e in range(1, 8) for m in range(4)])
    mids = (mags[:-1] + mags[1:]) / 2
    index = np.searchsorted(mids, np.abs(y).astype(np.float64), side="right")  # a tie goes up
    return np.sign(y) * mags[index]


def quantize(w, fmt, group=32):
    """w (rows, cols) float64 -> its decoded quantized values, float64."""
    w32 = w.astype(np.float32)
    half = lambda x: np.float32(x).astype(np.float16).astype(np.float32)
    if fmt == "fp6":
        scale = half(np.max(np.abs(w32), axis=1) / np.float32(28))[:, None]
        y = np.where(scale != 0, w32 / np.where(scale != 0, scale, 1), np.float32(0))
        return fp6_round(y).astype(np.float32).astype(np.float64) * scale
    g = w32.shape[1] if fmt == "int8" else group
    blocks = w32.reshape(w32.shape[0], -1, g)
    if fmt in ("int8", "q8_0"):
        d = np.max(np.abs(blocks), axis=2, keepdims=True) / np.float32(127)
        inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0)).astype(np.float32)
        x = blocks * inv
        q = np.clip(np.sign(x) * np.floor(np.abs(x) + np.float32(0.5)), -127, 127)  # half away
        return (q.astype(np.float32) * half(d)).astype(np.float64).reshape(w.shape)
    lo = np.min(blocks, axis=2, keepdims=True)
    d = (np.max(blocks, axis=2, keepdims=True) - lo) / np.float32(15)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0)).astype(np.float32)
    q = np.minimum(15, np.trunc((blocks - lo) * inv + np.float32(0.5)))
    return (q.astype(np.float32) * half(d) + half(lo)).astype(np.float64).reshape(w.shape)


def log_softmax(logits):
    top = logits.max(axis=1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))


def ppl(model_dir, tokens_text, window, fmt, output_layer):
    with open(model_dir + "/config.json") as f:
        config = json.load(f)
    w = load_weights(model_dir + "/model.safetensors")
    q = dict(w)
    if fmt != "none":
        for name, value in w.items():
            linear = ".self_attn." in name or ".mlp." in name
            if value.ndim == 2 and (linear or (name == "lm_head.weight" and output_layer == "1")):
                q[name] = quantize(value, fmt)
    tokens = [int(t) for t in tokens_text.split(",")]
    T = int(window)
    nll = base_nll = kl = 0.0
    n = 0
    for start in range(0, (len(tokens) - 1) // T * T, T):
        inputs, targets = tokens[start:start + T], np.array(tokens[start + 1:start + T + 1])
        lq = log_softmax(forward(config, q, inputs))
        lp = log_softmax(forward(config, w, inputs))
        nll -= lq[np.arange(T), targets].sum()
        base_nll -= lp[np.arange(T), targets].sum()
        kl += (np.exp(lp) * (lp - lq)).sum()
        n += T
    print(json.dumps({"ppl": math.exp(nll / n), "base_ppl": math.exp(base_nll / n), "kl_mean": kl / n,
                      "tokens": n}))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make":
        make(*args)
    elif cmd == "compare":
        sys.exit(compare(args[0], args[1], args[2], float(args[3])))
    elif cmd == "greedy":
        sys.exit(greedy(args[0], args[1], args[2], args[3], float(args[4])))
    elif cmd == "ppl":
        ppl(*args)
    elif cmd == "same-tensors":
        sys.exit(same_tensors(*args))
    else:
        sys.exit(f"hf_reference.py: unknown command {cmd}")
