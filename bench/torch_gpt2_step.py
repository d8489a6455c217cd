#!/usr/bin/env python3
"""GPT-2 training steps of troupe (bench/step_bench) beside PyTorch 2 running the same model,
on tiny, small and gpt2-124m, under both OpenBLAS settings, as one command.

  python3 bench/torch_gpt2_step.py [--rounds 5] [--threads 2] [--cases tiny,small,gpt2-124m]
                                   [--coretypes Haswell,unset] [--torch-modes eager,compiled]

For every case and every OPENBLAS_CORETYPE setting ("unset" removes the variable: OpenBLAS
then picks its kernel from cpuid, as a user runs it; "Haswell" as the development machines
set it), each round runs one troupe process (`step_bench --case C --threads N`, which
prints the compute line of the startup block, the median step and the same-run sgemm rate
of the kernel the step's GEMMs use) and one PyTorch process per mode (eager, and compiled:
torch.compile of the forward, whose backward inductor compiles with it), alternating, so
all see the same machine load; PyTorch's figure is the faster mode's median. The end prints, per case and setting, the medians over rounds
of both steps, troupe/PyTorch speed (ratio of the medians, median of per-round ratios, and
median of the per-round ratios of each process's best step: the least disturbed by other
load, which slows PyTorch's eager step far more than troupe's) and troupe's step share of the same-run sgemm rate (median of its per-round ratios).
PyTorch's BLAS (MKL, oneDNN) does not read OPENBLAS_CORETYPE; its figure is taken beside
each troupe setting anyway, and the goal compares against the best PyTorch median of the
case.

The PyTorch model (written here, nothing imported from troupe): wte + wpe, L blocks of
LayerNorm -> c_attn (bias) -> scaled_dot_product_attention(is_causal=True) -> c_proj
(bias) + residual, LayerNorm -> c_fc (bias) -> tanh GELU -> c_proj (bias) + residual,
final LayerNorm, logits tied to wte over the V real rows, mean cross-entropy; a step is
zero_grad + forward + backward + clip_grad_norm_(1.0) + AdamW (decay on the matrices), as
step_bench's. torch.set_num_threads(N), one inter-op thread, two warm-up steps, then the
median over step_bench's step count for the case. troupe packs several documents per
window and masks between them (the same flops as its GEMMs compute the masked pairs);
PyTorch runs one causal window.

torch comes from the virtual environment bench/torch_llama_step.py makes (default
build/torch-venv, `pip install torch` from PyPI); when that fails this script says why and
exits 77. The build and the tests never need it.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_llama_step import ROOT, ensure_venv  # noqa: E402

CASES = {
    # name: layers, heads, width, vocab, seq, batch, steps (as bench/step_bench.cpp)
    "tiny": (2, 4, 64, 256, 64, 8, 60),
    "small": (4, 4, 256, 4096, 128, 8, 20),
    "gpt2-124m": (12, 12, 768, 50257, 64, 4, 7),
}


def torch_worker(case, threads, mode):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(1234)
    L, NH, D, V, T, B, steps = CASES[case]

    def p(*shape, std=0.02):
        return torch.nn.Parameter(torch.randn(*shape) * std)

    def ones(n):
        return torch.nn.Parameter(torch.ones(n))

    def zeros(n):
        return torch.nn.Parameter(torch.zeros(n))

    params = {"wte": p(V, D), "wpe": p(T, D), "lnf.w": ones(D), "lnf.b": zeros(D)}
    for l in range(L):
        params.update({
            f"{l}.ln1.w": ones(D), f"{l}.ln1.b": zeros(D), f"{l}.ln2.w": ones(D), f"{l}.ln2.b": zeros(D),
            f"{l}.attn.w": p(3 * D, D), f"{l}.attn.b": zeros(3 * D), f"{l}.proj.w": p(D, D), f"{l}.proj.b": zeros(D),
            f"{l}.fc.w": p(4 * D, D), f"{l}.fc.b": zeros(4 * D), f"{l}.mproj.w": p(D, 4 * D),
            f"{l}.mproj.b": zeros(D)})
    pos = torch.arange(T)

    def forward(tokens, targets):
        x = F.embedding(tokens, params["wte"]) + F.embedding(pos, params["wpe"])
        for l in range(L):
            h = F.layer_norm(x, (D,), params[f"{l}.ln1.w"], params[f"{l}.ln1.b"])
            q, k, v = F.linear(h, params[f"{l}.attn.w"], params[f"{l}.attn.b"]).split(D, -1)
            q, k, v = (t.view(B, T, NH, D // NH).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
            x = x + F.linear(a, params[f"{l}.proj.w"], params[f"{l}.proj.b"])
            h = F.layer_norm(x, (D,), params[f"{l}.ln2.w"], params[f"{l}.ln2.b"])
            h = F.gelu(F.linear(h, params[f"{l}.fc.w"], params[f"{l}.fc.b"]), approximate="tanh")
            x = x + F.linear(h, params[f"{l}.mproj.w"], params[f"{l}.mproj.b"])
        x = F.layer_norm(x, (D,), params["lnf.w"], params["lnf.b"])
        logits = F.linear(x, params["wte"])
        return F.cross_entropy(logits.view(B * T, V), targets.view(B * T))

    decay = [t for t in params.values() if t.dim() == 2]
    no_decay = [t for t in params.values() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(42)
    tokens = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    all_params = list(params.values())

    # "compiled": torch.compile (inductor) of the forward; its backward is compiled with it
    # (AOTAutograd). The clip and AdamW stay eager, as in the eager mode.
    model = torch.compile(forward) if mode == "compiled" else forward

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(all_params, 1.0)
        opt.step()

    for _ in range(2):  # warm-up (and, compiled, the compilation)
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    print(f"torch {torch.__version__} {mode} step_s {statistics.median(times):.5f} best_s {min(times):.5f}")


def coretype_env(ct):
    """This process's environment with OPENBLAS_CORETYPE=ct, or without the variable for "unset"."""
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    if ct != "unset":
        env["OPENBLAS_CORETYPE"] = ct
    return env


def run_troupe(bench, case, threads, env):
    out = subprocess.run([bench, "--case", case, "--threads", str(threads)], capture_output=True, text=True,
                         check=True, env=env)
    f = out.stdout.split()
    # case th tokens/s step best fwd bwd opt GFLOP/s sgemm ratio ...
    return float(f[3]), float(f[4]), float(f[9]), float(f[10])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="tiny,small,gpt2-124m")
    ap.add_argument("--coretypes", default="Haswell,unset")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--venv", default=os.path.join(ROOT, "build", "torch-venv"))
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "step_bench"))
    ap.add_argument("--torch-modes", default="eager,compiled",
                    help="PyTorch runs per round: eager, compiled (torch.compile) or both; the best median counts")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="eager", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        torch_worker(a.worker, a.threads, a.mode)
        return 0
    cases = a.cases.split(",")
    for c in cases:
        if c not in CASES:
            print(f"unknown case {c} (tiny, small, gpt2-124m)")
            return 2
    modes = a.torch_modes.split(",")
    for m in modes:
        if m not in ("eager", "compiled"):
            print(f"unknown PyTorch mode {m} (eager, compiled)")
            return 2
    if not os.access(a.bench, os.X_OK):
        print(f"SKIP: {a.bench} not built (cmake --build build --target step_bench)")
        return 77
    py = ensure_venv(a.venv)
    flags = open("/proc/cpuinfo").read().split("flags\t\t: ", 1)[1].split("\n", 1)[0]
    print("CPU vector flags:", " ".join(f for f in flags.split() if f.startswith(("avx", "fma", "amx"))))
    results = {}
    for case in cases:
        L, NH, D, V, T, B, steps = CASES[case]
        for ct in a.coretypes.split(","):
            env = coretype_env(ct)
            header = subprocess.run([a.bench, "--header"], capture_output=True, text=True, env=env).stdout
            print(f"\n== {case}, OPENBLAS_CORETYPE={ct}: {header.splitlines()[0].lstrip('# ')}", flush=True)
            tenv = dict(env, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
            rows = []  # per round: troupe step, troupe best, share, sgemm, {mode: (torch step, torch best)}
            for r in range(a.rounds):
                t_troupe, best_troupe, sgemm, share = run_troupe(a.bench, case, a.threads, env)
                torch_times, line = {}, ""
                for mode in modes:
                    out = subprocess.run([py, os.path.abspath(__file__), "--worker", case, "--threads",
                                          str(a.threads), "--mode", mode], capture_output=True, text=True, env=tenv)
                    if out.returncode != 0:
                        print(out.stderr)
                        return 1
                    m = re.search(r"torch (\S+) (\S+) step_s (\S+) best_s (\S+)", out.stdout)
                    version, t_torch, best_torch = m.group(1), float(m.group(3)), float(m.group(4))
                    torch_times[mode] = (t_torch, best_torch)
                    line += (f" | torch {version} {mode} {t_torch:.4f} s/step (best {best_torch:.4f})"
                             f" troupe/torch {t_torch / t_troupe:.2f}")
                rows.append((t_troupe, best_troupe, share, sgemm, torch_times))
                print(f"  round {r + 1}: troupe {t_troupe:.4f} s/step (best {best_troupe:.4f}; sgemm {sgemm:.0f} GFLOP/s,"
                      f" share {share:.2f}){line}", flush=True)
            mt = statistics.median(r[0] for r in rows)
            torch_medians = {mode: statistics.median(r[4][mode][0] for r in rows) for mode in modes}
            best_mode = min(modes, key=lambda mode: torch_medians[mode])
            mp = torch_medians[best_mode]
            results[(case, ct)] = (mt, mp, best_mode, statistics.median(r[2] for r in rows),
                                   statistics.median(r[3] for r in rows))
            per_round = statistics.median(r[4][best_mode][0] / r[0] for r in rows)
            per_round_best = statistics.median(r[4][best_mode][1] / r[1] for r in rows)
            medians = ", ".join(f"{mode} {torch_medians[mode]:.4f} s/step ({B * T / torch_medians[mode]:,.0f} tokens/s)"
                                for mode in modes)
            print(f"  median troupe {mt:.4f} s/step ({B * T / mt:,.0f} tokens/s), torch {medians}; troupe/torch"
                  f" {best_mode}: ratio of medians {mp / mt:.2f}, median per-round {per_round:.2f}, median per-round"
                  f" of the best steps {per_round_best:.2f}; troupe share of the same-run sgemm rate"
                  f" {results[(case, ct)][3]:.2f} (sgemm {results[(case, ct)][4]:.0f} GFLOP/s)", flush=True)
    print("\nsummary (troupe speed over the best PyTorch median of the case, of every setting and mode;"
          " share of the same-run sgemm rate):")
    for case in cases:
        best_torch, best_mode = min((results[(case, ct)][1], results[(case, ct)][2]) for ct in a.coretypes.split(","))
        for ct in a.coretypes.split(","):
            mt, mp, mode, share, sgemm = results[(case, ct)]
            print(f"  {case:10s} OPENBLAS_CORETYPE={ct:8s} troupe {mt:.4f} s/step, best torch {best_torch:.4f}"
                  f" ({best_mode}): {best_torch / mt:.2f}x; share {share:.2f} of {sgemm:.0f} GFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
