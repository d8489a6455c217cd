#!/usr/bin/env python3
"""Independent PyTorch reference for one troupe update (docs/compute.md, "One inspectable update").

It implements the GPT-2 and Llama models (Llama: RMSNorm, rotary positions
restarting at each document, grouped-query attention, SwiGLU, tied or untied head;
without Llama 3's rotary scaling), the loss contract, global-norm clipping, the LR
schedule and AdamW from the written rules (docs/numerics.md), in float64, with
nothing shared with the C++ code. Two modes:

  make-fixture OUTDIR
      Builds the inspectable-update fixture the C++ test test/model/fixture_test.cpp
      reads: OUTDIR/config.textproto (the run config), OUTDIR/fixture.safetensors
      (initial weights, the batch, and the expected gradients, updated weights and
      Adam moments) and OUTDIR/expected.json (loss, loss-bearing tokens, norm, lr,
      and a few selected values to read by eye). Weights come from torch's RNG; the
      batch is 24 packed samples of 16 tokens: a long document spanning several
      windows, two short documents packed in one window, and padding.

  verify DIR
      Recomputes the update that `supervisor inspect-update --out DIR` recorded
      (from DIR/update.json, DIR/batch.safetensors and DIR/params_initial.safetensors)
      and compares every tensor and scalar with what the command wrote. Exit 1 on a
      mismatch.

Needs torch (pip install torch); the build and the tests never do.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

EOD = 256

# The fixture's run config. make-fixture writes it as config.textproto.
FIXTURE = dict(
    layers=2, heads=2, width=16, vocab_size=257, vocab_pad_multiple=64, max_positions=32,
    layernorm_eps=1e-5, micro_batch_size=4, global_batch_size=24, seq_length=16,
    lr=1e-3, min_lr=1e-4, warmup_init=5e-4, beta1=0.9, beta2=0.95, eps=1e-8,
    weight_decay=0.1, clip_grad=0.5, warmup_samples=48, decay_samples=480,
    decay_style="COSINE", train_samples=480, seed=1234,
)

CONFIG_TEXT = """# The config of tools/fixtures/inspect_update (written by tools/reference_update.py).
model {{ layers: {layers} heads: {heads} width: {width} vocab_size: {vocab_size}
        vocab_pad_multiple: {vocab_pad_multiple} max_positions: {max_positions} layernorm_eps: {layernorm_eps} }}
batch {{ micro_batch_size: {micro_batch_size} global_batch_size: {global_batch_size} seq_length: {seq_length} }}
optimizer {{ lr: {lr} min_lr: {min_lr} warmup_init: {warmup_init} beta1: {beta1} beta2: {beta2}
            eps: {eps} weight_decay: {weight_decay} clip_grad: {clip_grad} }}
lr_schedule {{ warmup_samples: {warmup_samples} decay_samples: {decay_samples} decay_style: {decay_style} }}
training {{ train_samples: {train_samples} seed: {seed} }}
"""

# ---------------------------------------------------------------- safetensors

def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, numpy array of float32/int32/int64)."""
    codes = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32", np.dtype(np.int64): "I64"}
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr)
        data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": codes[arr.dtype], "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    types = {"F32": np.float32, "I32": np.int32, "I64": np.int64}
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=np.dtype(types[v["dtype"]]).newbyteorder("<")).reshape(v["shape"])
    return out

# ---------------------------------------------------------------- the model

def padded_vocab(c):
    m = c["vocab_pad_multiple"]
    return (c["vocab_size"] + m - 1) // m * m


def is_llama(c):
    return c.get("architecture", "GPT2") == "LLAMA"


def head_size(c):
    """update.json's head_dim (written since model.head_dim exists), else width / heads."""
    return c.get("head_dim") or c["width"] // c["heads"]


def llama_param_shapes(c):
    """Hugging Face Llama names and shapes (nn.Linear weights [out, in]), embeddings unpadded."""
    D, V, L, F_ = c["width"], c["vocab_size"], c["layers"], c["ffn_width"]
    hs = head_size(c)
    A, KVs = c["heads"] * hs, c["kv_heads"] * hs
    shapes = [("model.embed_tokens.weight", (V, D))]
    for i in range(L):
        p = f"model.layers.{i}."
        shapes += [(p + "input_layernorm.weight", (D,)), (p + "self_attn.q_proj.weight", (A, D)),
                   (p + "self_attn.k_proj.weight", (KVs, D)), (p + "self_attn.v_proj.weight", (KVs, D)),
                   (p + "self_attn.o_proj.weight", (D, A)), (p + "post_attention_layernorm.weight", (D,)),
                   (p + "mlp.gate_proj.weight", (F_, D)), (p + "mlp.up_proj.weight", (F_, D)),
                   (p + "mlp.down_proj.weight", (D, F_))]
    shapes += [("model.norm.weight", (D,))]
    if not c["tied_embeddings"]:
        shapes += [("lm_head.weight", (V, D))]
    return shapes


def param_shapes(c):
    """Hugging Face GPT-2 names and shapes (Conv1D weights [in, out]), wte unpadded."""
    if is_llama(c):
        return llama_param_shapes(c)
    D, V, P, L = c["width"], c["vocab_size"], c["max_positions"], c["layers"]
    F4 = 4 * D
    shapes = [("wte.weight", (V, D)), ("wpe.weight", (P, D))]
    for i in range(L):
        p = f"h.{i}."
        shapes += [(p + "ln_1.weight", (D,)), (p + "ln_1.bias", (D,)),
                   (p + "attn.c_attn.weight", (D, 3 * D)), (p + "attn.c_attn.bias", (3 * D,)),
                   (p + "attn.c_proj.weight", (D, D)), (p + "attn.c_proj.bias", (D,)),
                   (p + "ln_2.weight", (D,)), (p + "ln_2.bias", (D,)),
                   (p + "mlp.c_fc.weight", (D, F4)), (p + "mlp.c_fc.bias", (F4,)),
                   (p + "mlp.c_proj.weight", (F4, D)), (p + "mlp.c_proj.bias", (D,))]
    shapes += [("ln_f.weight", (D,)), ("ln_f.bias", (D,))]
    return shapes


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rotate(x, pos, theta):
    """Rotary positions, Hugging Face's rotate-half pairing: x [S, H, T, hs], pos [S, T]."""
    hs = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    ang = pos[:, None, :, None].double() * inv  # [S, 1, T, hs/2]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    half = torch.cat([-x[..., hs // 2:], x[..., :hs // 2]], -1)
    return x * cos + half * sin


def llama_loss_sum_and_tokens(P, b, c):
    """The Llama forward (RMSNorm, rotary positions restarting at each document,
    grouped-query attention, SwiGLU, head tied or not) and its masked loss sum."""
    D, H, L, V, KV = c["width"], c["heads"], c["layers"], c["vocab_size"], c["kv_heads"]
    hs, eps, theta = head_size(c), c["norm_eps"], c["rope_theta"]
    tok, pos, seg, tgt, mask = b["tokens"], b["positions"], b["segments"], b["targets"], b["loss_mask"]
    S, T = tok.shape
    x = P["model.embed_tokens.weight"][tok]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    allowed = causal[None] & (seg[:, :, None] == seg[:, None, :])
    for i in range(L):
        p = f"model.layers.{i}."
        h = rms_norm(x, P[p + "input_layernorm.weight"], eps)
        q = (h @ P[p + "self_attn.q_proj.weight"].T).view(S, T, H, hs).transpose(1, 2)
        k = (h @ P[p + "self_attn.k_proj.weight"].T).view(S, T, KV, hs).transpose(1, 2)
        v = (h @ P[p + "self_attn.v_proj.weight"].T).view(S, T, KV, hs).transpose(1, 2)
        q, k = rotate(q, pos, theta), rotate(k, pos, theta)
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
        att = att.masked_fill(~allowed[:, None], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(S, T, H * hs)
        x = x + y @ P[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        g = F.silu(h @ P[p + "mlp.gate_proj.weight"].T) * (h @ P[p + "mlp.up_proj.weight"].T)
        x = x + g @ P[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, P["model.norm.weight"], eps)
    head = P["model.embed_tokens.weight"] if c["tied_embeddings"] else P["lm_head.weight"]
    logits = x @ head[:V].T
    ce = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), reduction="none")
    return (ce * mask.reshape(-1)).sum(), int(mask.sum().item())


def loss_sum_and_tokens(P, b, c):
    """Sum of per-token cross-entropy over loss-bearing positions, and their count."""
    if is_llama(c):
        return llama_loss_sum_and_tokens(P, b, c)
    D, H, L, V = c["width"], c["heads"], c["layers"], c["vocab_size"]
    hs = D // H
    eps = c["layernorm_eps"]
    tok, pos, seg, tgt = b["tokens"], b["positions"], b["segments"], b["targets"]
    mask = b["loss_mask"]
    S, T = tok.shape
    x = P["wte.weight"][tok] + P["wpe.weight"][pos]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    allowed = causal[None] & (seg[:, :, None] == seg[:, None, :])  # query t sees key s
    for i in range(L):
        p = f"h.{i}."
        h = F.layer_norm(x, (D,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
        qkv = h @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(D, dim=-1)
        q, k, v = (t.view(S, T, H, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
        att = att.masked_fill(~allowed[:, None], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(S, T, D)
        x = x + y @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (D,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
        h = F.gelu(h @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (D,), P["ln_f.weight"], P["ln_f.bias"], eps)
    logits = x @ P["wte.weight"][:V].T  # the tied head over the real vocabulary only
    ce = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), reduction="none")
    return (ce * mask.reshape(-1)).sum(), int(mask.sum().item())


def lr_for_first_update(c):
    """The LR of the first update: the schedule in samples at the samples consumed before
    it, 0 (Megatron's training loop: the scheduler steps after the optimizer)."""
    s = 0
    w, d = c["warmup_samples"], c["decay_samples"]
    if w > 0 and s <= w:
        return c["warmup_init"] + (c["lr"] - c["warmup_init"]) * s / w
    t = min(1.0, (s - w) / (d - w))
    if c["decay_style"] == "CONSTANT":
        return c["lr"]
    if c["decay_style"] == "LINEAR":
        return c["min_lr"] + (c["lr"] - c["min_lr"]) * (1 - t)
    return c["min_lr"] + (c["lr"] - c["min_lr"]) * 0.5 * (1 + math.cos(math.pi * t))


def one_update(init, batch, c):
    """init: name -> float32 array (HF shapes). Returns a dict of results (float64)."""
    P = {n: torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for n, a in init.items()}
    b = {k: torch.tensor(np.asarray(v)) for k, v in batch.items()}
    for k in ("tokens", "positions", "segments", "targets"):
        b[k] = b[k].long()
    b["loss_mask"] = b["loss_mask"].double()
    loss_sum, tokens = loss_sum_and_tokens(P, b, c)
    loss = loss_sum / tokens
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in P.items()}
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
    clip = c["clip_grad"]
    factor = clip / norm if clip > 0 and norm > clip else 1.0
    lr = lr_for_first_update(c)
    decay = [p for n, p in P.items() if p.dim() == 2]
    no_decay = [p for n, p in P.items() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(c["beta1"], c["beta2"]), eps=c["eps"])
    with torch.no_grad():
        for p in P.values():
            p.grad.mul_(factor)
    opt.step()
    return dict(loss=float(loss.detach()), loss_sum=float(loss_sum.detach()), loss_tokens=tokens, grad_norm=norm,
                clip_factor=factor, clipped=factor < 1.0, lr=lr, grads=grads,
                params={n: p.detach() for n, p in P.items()},
                exp_avg={n: opt.state[p]["exp_avg"] for n, p in P.items()},
                exp_avg_sq={n: opt.state[p]["exp_avg_sq"] for n, p in P.items()})

# ---------------------------------------------------------------- the fixture batch

TEXTS = [
    # a long document: spans several windows
    "The first acceptance dataset contains only a few dozen examples: long documents, two short "
    "documents packed into one window, and padding positions deliberately included to test the rules.",
    "Hi.",
    "Ok!",
    "Loss of a step is the sum of per-token losses over all loss-bearing tokens of the global batch.",
    "Packed windows restart positions at each document start.",
    "A token attends only to earlier tokens of its own document.",
    "Padding carries no loss.",
    "The end-of-document token is learned.",
]


def pack(T):
    """24 samples of T + 1 tokens. Samples 0-15: the documents end to end (each
    followed by EOD) cut into windows that share their boundary token (Megatron's
    sample layout), so the long document continues across samples. Samples 16-23:
    whole documents padded to the window end (pad-to-boundary), including two short
    documents in one window."""
    stream, seg_of = [], []
    for d, t in enumerate(TEXTS):
        ids = list(t.encode()) + [EOD]
        stream += ids
        seg_of += [d] * len(ids)
    rows = []
    for i in range(16):
        rows.append([(stream[j], seg_of[j]) for j in range(i * T, i * T + T + 1)])
    padded_docs = [[1, 2], [6], [4], [1], [2, 1, 2], [7], [3], [5]]
    for docs in padded_docs:
        row = []
        for d in docs:
            ids = list(TEXTS[d].encode()) + [EOD]
            take = ids[: T + 1 - len(row)]
            doc_segment = 100 + len(row)  # unique per document in the row
            row += [(x, doc_segment) for x in take]
            if len(row) == T + 1:
                break
        rows.append(row + [(EOD, -1)] * (T + 1 - len(row)))
    tokens, targets, positions, segments, mask = [], [], [], [], []
    for row in rows:
        # segment IDs: renumber runs 0, 1, 2 ... within the row; padding (-1) is its own run
        seg, cur, last = [], -1, None
        for _, s in row:
            if s != last:
                cur += 1
                last = s
            seg.append(cur)
        pos, p = [], 0
        for i in range(T + 1):
            p = 0 if i == 0 or seg[i] != seg[i - 1] else p + 1
            pos.append(p)
        pad = [s == -1 for _, s in row]
        tokens.append([x for x, _ in row[:T]])
        targets.append([x for x, _ in row[1:]])
        positions.append(pos[:T])
        segments.append(seg[:T])
        mask.append([1.0 if (not pad[i] and seg[i] == seg[i + 1]) else 0.0 for i in range(T)])
    return dict(tokens=np.array(tokens, np.int32), targets=np.array(targets, np.int32),
                positions=np.array(positions, np.int32), segments=np.array(segments, np.int32),
                loss_mask=np.array(mask, np.float32))


def make_init(c, seed):
    """Weights from torch's RNG, larger than GPT-2's 0.02 and with non-zero biases and
    norm parameters, so that every path of the gradient is exercised."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in param_shapes(c):
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            t = 1 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif len(shape) == 1:
            t = 0.05 * torch.randn(shape, generator=g, dtype=torch.float64)
        else:
            std = 0.1 / math.sqrt(2 * c["layers"]) if "c_proj" in name else 0.1
            t = std * torch.randn(shape, generator=g, dtype=torch.float64)
        out[name] = t.float().numpy()
    return out


def make_fixture(outdir):
    c = FIXTURE
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "config.textproto"), "w") as f:
        f.write(CONFIG_TEXT.format(**c))
    batch = pack(c["seq_length"])
    init = make_init(c, 20261129)
    r = one_update(init, batch, c)
    assert r["clipped"], "the fixture should exercise clipping; lower clip_grad"
    tensors = [("batch." + k, v) for k, v in batch.items()]
    for prefix, src in (("init.", init), ("grad.", r["grads"]), ("param.", r["params"]),
                        ("exp_avg.", r["exp_avg"]), ("exp_avg_sq.", r["exp_avg_sq"])):
        for name, _ in param_shapes(c):
            v = src[name]
            tensors.append((prefix + name, np.asarray(v.numpy() if torch.is_tensor(v) else v, dtype=np.float32)))
    write_safetensors(os.path.join(outdir, "fixture.safetensors"), tensors,
                      {"producer": "tools/reference_update.py make-fixture", "torch": torch.__version__})
    sel = dict(
        grad_h0_c_attn_w_0_0=float(r["grads"]["h.0.attn.c_attn.weight"][0, 0]),
        grad_wte_eod_0=float(r["grads"]["wte.weight"][EOD, 0]),
        param_wte_84_3=float(r["params"]["wte.weight"][84, 3]),
        param_h1_ln_2_bias_5=float(r["params"]["h.1.ln_2.bias"][5]),
    )
    expected = dict(loss=r["loss"], loss_sum=r["loss_sum"], loss_tokens=r["loss_tokens"],
                    samples=int(batch["tokens"].shape[0]), grad_norm=r["grad_norm"],
                    clip_factor=r["clip_factor"], clipped=r["clipped"], lr=r["lr"], selected=sel)
    with open(os.path.join(outdir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2)
        f.write("\n")
    print(json.dumps({k: v for k, v in expected.items() if k != "selected"}, indent=2))

# ---------------------------------------------------------------- verify an inspect-update directory

def verify(d):
    with open(os.path.join(d, "update.json")) as f:
        u = json.load(f)
    c = dict(u["config"])
    if c.get("hidden_dropout", 0) > 0 or c.get("attention_dropout", 0) > 0:
        # troupe's masks (kernels/dropout.h) are not redrawn here.
        print("cannot verify: the update was recorded with dropout on (hidden "
              f"{c.get('hidden_dropout')}, attention {c.get('attention_dropout')}); "
              "record it with --set model.hidden_dropout=0 --set model.attention_dropout=0")
        return 2
    batch_st = read_safetensors(os.path.join(d, "batch.safetensors"))
    batch = {k: batch_st[k] for k in ("tokens", "targets", "positions", "segments", "loss_mask")}
    init = read_safetensors(os.path.join(d, "params_initial.safetensors"))
    c["global_batch_size"] = batch["tokens"].shape[0]
    r = one_update(init, batch, c)
    failures = []

    def scalar(name, want, have, rel):
        have = float(have)  # update.json writes a non-finite number as "nan", "inf" or "-inf"
        ok = abs(have - want) <= rel * abs(want)
        print(f"{'ok ' if ok else 'BAD'} {name}: troupe {have!r} reference {want!r}")
        if not ok:
            failures.append(name)

    scalar("loss", r["loss"], u["loss"], 1e-5)
    scalar("loss_tokens", r["loss_tokens"], u["loss_tokens"], 0)
    scalar("grad_norm", r["grad_norm"], u["grad_norm"], 1e-5)
    scalar("clip_factor", r["clip_factor"], u["clip_factor"], 1e-5)
    scalar("lr", r["lr"], u["lr"], 1e-12)
    recorded = {f: read_safetensors(os.path.join(d, f + ".safetensors"))
                for f in ("grads", "params_updated", "adam_m", "adam_v")}
    for fname, key, tol in (("grads", "grads", 1e-4), ("adam_m", "exp_avg", 1e-4), ("adam_v", "exp_avg_sq", 2e-4)):
        worst = 0.0
        for name, _ in param_shapes(c):
            want = r[key][name].numpy()
            diff = float(np.abs(recorded[fname][name].astype(np.float64) - want).max())
            bound = tol * float(np.abs(want).max())
            worst = max(worst, diff / bound if bound > 0 else (0.0 if diff == 0 else float("inf")))
            if diff > bound:
                failures.append(f"{fname}:{name}")
                print(f"BAD {fname} {name}: max |diff| {diff:.3g} > {bound:.3g} (1e-4 of the largest)")
        print(f"{'ok ' if worst <= 1 else 'BAD'} {fname}: worst diff {worst:.3g} of the bound")
    # Updated parameters, two ways, bound 1e-6 absolute (the step is lr per element):
    # (a) every element against AdamW's formula applied in float64 to the recorded m, v;
    # (b) against the reference's own update wherever the step is well conditioned.
    # AdamW's first step moves p by lr * g / (|g| + eps): where |clip * g| is within
    # 100 eps of zero, fp32 rounding of g (e.g. the exactly-zero attention key-bias
    # gradient) legitimately changes the step, so (b) leaves those elements to (a).
    b1, b2, eps, lr = c["beta1"], c["beta2"], c["eps"], r["lr"]
    worst_a = worst_b = 0.0
    excluded = 0
    for name, shape in param_shapes(c):
        p0 = init[name].astype(np.float64)
        m = recorded["adam_m"][name].astype(np.float64)
        v = recorded["adam_v"][name].astype(np.float64)
        wd = c["weight_decay"] if len(shape) == 2 else 0.0
        formula = p0 * (1 - lr * wd) - lr * (m / (1 - b1)) / (np.sqrt(v / (1 - b2)) + eps)
        have = recorded["params_updated"][name].astype(np.float64)
        da = float(np.abs(have - formula).max())
        well = np.abs(r["clip_factor"] * r["grads"][name].numpy()) >= 100 * eps
        excluded += int((~well).sum())
        db = float(np.abs(have - r["params"][name].numpy())[well].max()) if well.any() else 0.0
        worst_a, worst_b = max(worst_a, da / 1e-6), max(worst_b, db / 1e-6)
        for label, diff in (("AdamW formula", da), ("reference", db)):
            if diff > 1e-6:
                failures.append(f"params_updated:{name} ({label})")
                print(f"BAD params_updated {name}: max |diff| from the {label} {diff:.3g} > 1e-06")
    print(f"{'ok ' if worst_a <= 1 else 'BAD'} params_updated vs AdamW on the recorded m, v: worst diff {worst_a:.3g} of the bound")
    print(f"{'ok ' if worst_b <= 1 else 'BAD'} params_updated vs reference: worst diff {worst_b:.3g} of the bound "
          f"({excluded} ill-conditioned elements with |clip * g| < 100 eps left to the formula check)")
    if failures:
        print("MISMATCH:", ", ".join(failures))
        return 1
    print("the recorded update matches the independent reference")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    sub.add_parser("make-fixture").add_argument("outdir")
    sub.add_parser("verify").add_argument("dir")
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    if a.mode == "make-fixture":
        make_fixture(a.outdir)
        return 0
    return verify(a.dir)


if __name__ == "__main__":
    sys.exit(main())
