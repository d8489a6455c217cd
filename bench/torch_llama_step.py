#!/usr/bin/env python3
"""The Llama-shaped training step of step_bench beside PyTorch running the same model.

  python3 bench/torch_llama_step.py [--rounds 3] [--threads 2] [--case llama-small]

Each round runs troupe's `build/bench/step_bench --case CASE --threads N` (one process)
and then the same step in plain PyTorch (another process), alternating, so both see the
same machine load; the end prints the per-round numbers, the medians and the ratio
(troupe tokens/s over PyTorch tokens/s) of the medians, the median of the per-round
ratios, and the median of the per-round ratios of the best steps (the least disturbed
by other load on a shared machine).

The PyTorch model (written here, nothing imported from troupe): token embedding, L blocks
of RMSNorm -> q, k, v projections (no bias) -> rotary (rotate-half pairing) on q and k
-> grouped-query attention by torch.nn.functional.scaled_dot_product_attention with
is_causal=True (k and v repeated per query head with repeat_interleave, or the
enable_gqa argument with --gqa enable) -> o projection + residual; RMSNorm -> SwiGLU
(down(silu(gate x) * up x)) + residual; final RMSNorm; untied head; mean cross-entropy.
A step is zero_grad + forward + backward + clip_grad_norm_(1.0) + AdamW, as step_bench's
(which times zero + forward | backward | norm + clip + AdamW). Two warm-up steps, then the
median over the case's steps. torch.set_num_threads(N), one inter-op thread.

Differences that do not change the arithmetic counted: troupe's windows pack several
documents and its attention masks across document boundaries (as GEMMs over the whole
window, masked pairs cost the same flops); PyTorch runs one causal window with positions
0..T-1. troupe's logits are fp32 like PyTorch's.

torch comes from a virtual environment this script makes (default build/torch-venv,
`pip install torch` from PyPI); when pip or the import fails the script says why and
exits 77 (skipped). The build and the tests never need it.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

CASES = {
    # name: layers, heads, kv_heads, width, ffn, vocab, seq, batch, steps (as bench/step_bench.cpp)
    "llama-small": (4, 4, 2, 256, 688, 4096, 128, 8, 20),
    "llama-124m": (12, 12, 4, 768, 2048, 50257, 64, 4, 7),
}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ensure_venv(venv):
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py) and subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
        return py
    try:
        if not os.path.exists(py):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "--quiet", "torch"], check=True)
        subprocess.run([py, "-c", "import torch"], check=True)
    except (subprocess.CalledProcessError, OSError) as e:
        print(f"SKIP: could not make a virtual environment with torch in {venv} ({e})")
        sys.exit(77)
    return py


def torch_worker(case, threads, gqa):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(1234)
    L, NH, KV, D, FF, V, T, B, steps = CASES[case]
    hs = D // NH

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    inv = 1.0 / (10000.0 ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos = torch.cat([ang.cos(), ang.cos()], -1).float()
    sin = torch.cat([ang.sin(), ang.sin()], -1).float()

    def rope(x):  # x [B, H, T, hs]
        a, b = x[..., : hs // 2], x[..., hs // 2:]
        return x * cos + torch.cat([-b, a], -1) * sin

    def p(*shape, std=0.02):
        return torch.nn.Parameter(torch.randn(*shape) * std)

    params = {"wte": p(V, D), "head": p(V, D), "norm": torch.nn.Parameter(torch.ones(D))}
    for l in range(L):
        params.update({
            f"{l}.n1": torch.nn.Parameter(torch.ones(D)), f"{l}.n2": torch.nn.Parameter(torch.ones(D)),
            f"{l}.q": p(D, D), f"{l}.k": p(KV * hs, D), f"{l}.v": p(KV * hs, D), f"{l}.o": p(D, D),
            f"{l}.gate": p(FF, D), f"{l}.up": p(FF, D), f"{l}.down": p(D, FF)})

    def forward(tokens, targets):
        x = F.embedding(tokens, params["wte"])
        for l in range(L):
            h = rms(x, params[f"{l}.n1"])
            q = F.linear(h, params[f"{l}.q"]).view(B, T, NH, hs).transpose(1, 2)
            k = F.linear(h, params[f"{l}.k"]).view(B, T, KV, hs).transpose(1, 2)
            v = F.linear(h, params[f"{l}.v"]).view(B, T, KV, hs).transpose(1, 2)
            q, k = rope(q), rope(k)
            if gqa == "enable":
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                a = F.scaled_dot_product_attention(q, k.repeat_interleave(NH // KV, 1),
                                                   v.repeat_interleave(NH // KV, 1), is_causal=True)
            x = x + F.linear(a.transpose(1, 2).reshape(B, T, D), params[f"{l}.o"])
            h = rms(x, params[f"{l}.n2"])
            x = x + F.linear(F.silu(F.linear(h, params[f"{l}.gate"])) * F.linear(h, params[f"{l}.up"]),
                             params[f"{l}.down"])
        logits = F.linear(rms(x, params["norm"]), params["head"])
        return F.cross_entropy(logits.view(B * T, V), targets.view(B * T))

    decay = [t for n, t in params.items() if t.dim() == 2]
    no_decay = [t for n, t in params.items() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(42)
    tokens = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    all_params = list(params.values())

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(all_params, 1.0)
        opt.step()

    for _ in range(2):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    # torch's own matmul rate on the same threads, right after (the BLAS it links: MKL on x86).
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    t0 = time.perf_counter()
    a @ b
    mm = 2 * 1024 ** 3 / (time.perf_counter() - t0) / 1e9
    print(f"torch {torch.__version__} step_s {statistics.median(times):.5f} best_s {min(times):.5f} mm_gflops {mm:.1f}")


def run_troupe(bench, case, threads):
    out = subprocess.run([bench, "--case", case, "--threads", str(threads)], capture_output=True, text=True, check=True)
    f = out.stdout.split()
    # case th tokens/s step best fwd bwd opt GFLOP/s sgemm ratio ...
    return float(f[3]), float(f[4]), float(f[10]), float(f[9])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="llama-small", choices=sorted(CASES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gqa", default="repeat", choices=["repeat", "enable"])
    ap.add_argument("--venv", default=os.path.join(ROOT, "build", "torch-venv"))
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "step_bench"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        torch_worker(a.case, a.threads, a.gqa)
        return 0
    if not os.access(a.bench, os.X_OK):
        print(f"SKIP: {a.bench} not built (cmake --build build --target step_bench)")
        return 77
    py = ensure_venv(a.venv)
    L, NH, KV, D, FF, V, T, B, steps = CASES[a.case]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    rows = []
    for r in range(a.rounds):
        t_troupe, best_troupe, ratio, sgemm = run_troupe(a.bench, a.case, a.threads)
        out = subprocess.run([py, os.path.abspath(__file__), "--worker", "--case", a.case, "--threads", str(a.threads),
                              "--gqa", a.gqa], capture_output=True, text=True, env=env)
        if out.returncode != 0:
            print(out.stderr)
            return 1
        m = re.search(r"torch (\S+) step_s (\S+) best_s (\S+) mm_gflops (\S+)", out.stdout)
        version, t_torch, best_torch, mm = m.group(1), float(m.group(2)), float(m.group(3)), float(m.group(4))
        rows.append((t_troupe, t_torch, ratio, best_troupe, best_torch))
        print(f"round {r + 1}: troupe {t_troupe:.4f} s/step (best {best_troupe:.4f}; {B * T / t_troupe:,.0f} tokens/s;"
              f" OpenBLAS sgemm {sgemm:.0f} GFLOP/s, share {ratio:.2f})"
              f" | torch {version} {t_torch:.4f} s/step (best {best_torch:.4f}; {B * T / t_torch:,.0f} tokens/s;"
              f" torch 1024^3 matmul {mm:.0f} GFLOP/s)"
              f" | troupe/torch speed {t_torch / t_troupe:.2f}", flush=True)
    mt, mp = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
    print(f"{a.case}, {a.threads} threads, {a.rounds} rounds (gqa {a.gqa}): median troupe {mt:.4f} s/step "
          f"({B * T / mt:,.0f} tokens/s), median torch {mp:.4f} s/step ({B * T / mp:,.0f} tokens/s), "
          f"troupe/torch speed: ratio of medians {mp / mt:.2f}, median of per-round ratios "
          f"{statistics.median(r[1] / r[0] for r in rows):.2f}, median of per-round best-step ratios "
          f"{statistics.median(r[4] / r[3] for r in rows):.2f} (above 1: troupe faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
