#!/usr/bin/env python3
"""The GEMMs of a GPT-2 step at the model's shapes: troupe's candidates (bench/sgemm_candidates,
each run the way the CPU device runs it) beside PyTorch 2's matmul (MKL / oneDNN), alternated,
as one command.

  python3 bench/torch_gemm_shapes.py [--rounds 5] [--inner 5] [--threads 2] [--cases small]
                                     [--coretypes Haswell,unset]

Each of R rounds runs one `sgemm_candidates --rounds I` process (its shapes, checked against a
double-precision product, then timed: I rounds of one warm-up call and one timed call per
shape, the median per shape) and then one PyTorch process that times the same shapes the
same way (torch.addmm with beta 1 into C, op(A) and op(B) as strided views of the same
layouts: TN's A is stored [K, M], NT's B [N, K]) with torch.set_num_threads(N). Fresh
processes alternate so that both sides see the same machine; the rounds inside a process
keep first-touch costs (a library's packing buffers) out of the medians, as in a training
run's long-lived process. The shapes are read from sgemm_candidates' own output, so both
sides time the same list. The end prints per shape the medians over the R processes
(GFLOP/s), and a whole step's GEMM time: L times the layer's twelve GEMMs plus the head's
three (attention's per-head GEMMs left out on both sides), for PyTorch and every candidate,
and their ratio.

With a step's time from bench/torch_gpt2_step.py this splits each side's step into GEMM and
the rest. torch comes from the virtual environment of bench/torch_llama_step.py (default
build/torch-venv); when that fails this script says why and exits 77.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2_step import CASES, coretype_env  # noqa: E402
from torch_llama_step import ROOT, ensure_venv  # noqa: E402

# "  c_attn fwd NN 1024x768x256    110.1  166.6 ..." in sgemm_candidates' table
SHAPE_ROW = re.compile(r"^  (.+?) (NN|NT|TN|TT) (\d+)x(\d+)x(\d+)\s+((?:\s*(?:[\d.]+|wrong))+)$")


def torch_worker(threads, inner, shapes_json):
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(1234)
    shapes = json.loads(shapes_json)
    operands = []
    for name, op, M, N, K in shapes:
        A = torch.rand(K, M).t() if op[0] == "T" else torch.rand(M, K)
        B = torch.rand(N, K).t() if op[1] == "T" else torch.rand(K, N)
        operands.append((A, B, torch.rand(M, N)))
    seconds = {s[0]: [] for s in shapes}
    for _ in range(inner):  # as sgemm_candidates: each round every shape, one warm-up call, one timed
        for (name, *_), (A, B, C) in zip(shapes, operands):
            torch.addmm(C, A, B, out=C)
            t0 = time.perf_counter()
            torch.addmm(C, A, B, out=C)
            seconds[name].append(time.perf_counter() - t0)
    print("torch", torch.__version__, json.dumps({n: statistics.median(t) for n, t in seconds.items()}))


def run_candidates(bench, case, threads, inner, env):
    """One process of sgemm_candidates: [(name, op, M, N, K)], {candidate: {name: GFLOP/s}}, candidate names."""
    out = subprocess.run([bench, "--threads", str(threads), "--rounds", str(inner), "--cases", case], capture_output=True,
                         text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"sgemm_candidates failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    lines = out.stdout.splitlines()
    header = next(l for l in lines if l.strip().startswith("shape (op"))
    names = header.split(")", 1)[1].split()[:-4]  # "... openblas dnnl own GFLOP/s, median of 5"
    for l in lines:
        if " WRONG on " in l:
            print("  " + l.strip() + " (left out)")
    shapes, rates = [], {n: {} for n in names}
    for l in lines:
        m = SHAPE_ROW.match(l)
        if not m:
            continue
        name = m.group(1)
        shapes.append((name, m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5))))
        for cand, v in zip(names, m.group(6).split()):
            if v != "wrong":
                rates[cand][name] = float(v)
    names = [n for n in names if len(rates[n]) == len(shapes)]  # a wrong candidate is not timed
    return shapes, rates, names, out.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="small")
    ap.add_argument("--coretypes", default="Haswell,unset")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--inner", type=int, default=5, help="rounds within each process (its median counts)")
    ap.add_argument("--venv", default=os.path.join(ROOT, "build", "torch-venv"))
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "sgemm_candidates"))
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        torch_worker(a.threads, a.inner, a.worker)
        return 0
    for c in a.cases.split(","):
        if c not in CASES:
            print(f"unknown case {c} ({', '.join(CASES)})")
            return 2
    if not os.access(a.bench, os.X_OK):
        print(f"SKIP: {a.bench} not built (cmake --build build --target sgemm_candidates)")
        return 77
    py = ensure_venv(a.venv)
    for case in a.cases.split(","):
        layers = CASES[case][0]
        for ct in a.coretypes.split(","):
            env = coretype_env(ct)
            tenv = dict(env, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
            torch_rounds, cand_rounds, shapes, names, version = [], [], [], [], ""
            for r in range(a.rounds):
                shapes, rates, names, text = run_candidates(a.bench, case, a.threads, a.inner, env)
                if r == 0:
                    print(f"\n== {case}, OPENBLAS_CORETYPE={ct}, {a.threads} threads, {a.rounds} alternated processes"
                          f" a side, {a.inner} rounds in each")
                    for l in text.splitlines():
                        if l.startswith(("CPU:", "candidate", "  ")) and not SHAPE_ROW.match(l) and "shape (op" not in l \
                                and "whole step" not in l:
                            print("  " + l.strip())
                cand_rounds.append(rates)
                spec = json.dumps([list(s) for s in shapes])
                out = subprocess.run([py, os.path.abspath(__file__), "--threads", str(a.threads), "--inner", str(a.inner),
                                      "--worker", spec],
                                     capture_output=True, text=True, env=tenv)
                if out.returncode != 0:
                    print(out.stderr)
                    return 1
                line = next(l for l in out.stdout.splitlines() if l.startswith("torch "))
                version, times = line.split(" ", 2)[1], json.loads(line.split(" ", 2)[2])
                torch_rounds.append({n: 2.0 * M * N * K / times[n] / 1e9 for n, _, M, N, K in shapes})
            cols = ["torch"] + names
            med = {"torch": {s[0]: statistics.median(t[s[0]] for t in torch_rounds) for s in shapes}}
            for c in names:
                med[c] = {s[0]: statistics.median(t[c][s[0]] for t in cand_rounds) for s in shapes}
            print(f"  {'shape (op, M x N x K)':40s}" + "".join(f"{c:>10s}" for c in cols) + "   GFLOP/s, medians")
            for name, op, M, N, K in shapes:
                print(f"  {name + ' ' + op + f' {M}x{N}x{K}':40s}" + "".join(f"{med[c][name]:10.1f}" for c in cols))
            # A step's GEMM time: the layer's shapes L times, the head's once (per round, then the median).
            def step_seconds(rate_of):
                total = 0.0
                for name, op, M, N, K in shapes:
                    total += (1 if name.startswith("head") else layers) * 2.0 * M * N * K / (rate_of[name] * 1e9)
                return total

            per_side = {"torch": [step_seconds(t) for t in torch_rounds]}
            for c in names:
                per_side[c] = [step_seconds(t[c]) for t in cand_rounds]
            t_torch = statistics.median(per_side["torch"])
            print(f"  a step's GEMMs ({layers} layers + head), median of rounds: torch {version} {t_torch * 1e3:.1f} ms"
                  + "".join(f"; {c} {statistics.median(per_side[c]) * 1e3:.1f} ms"
                            f" (torch / {c} {t_torch / statistics.median(per_side[c]):.2f})" for c in names),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
