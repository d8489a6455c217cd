#!/usr/bin/env python3
"""Reads a run's TensorBoard event files with two readers troupe did not write and checks
that they agree: TensorBoard's EventAccumulator over RUN_DIR/events (every file in name
order as one stream, a SessionLog START dropping the points at its step or later) and
tbparse's SummaryReader(RUN_DIR/events).scalars (each file alone, one EventAccumulator a
file, the points of all files together). Sets up its own virtual environment
(build/tb-readers-venv, `pip install tensorboard tbparse`) when either is not importable;
exits 77 (skipped) with the reason when that fails.

Usage: tb_readers_check.py RUN_DIR

Checks, for every scalar tag:
  - each reader shows each step once;
  - both readers show the same steps with the same values;
  - the loss curve is steps 1..N, N the last step in RUN_DIR/metrics.jsonl, each with
    the loss of that step's last line there (the line of the timeline that continued,
    docs/metrics.md), as float32.
Prints one line per failed check ("FAIL ...") and a summary line. Exit status: 0 when
every check passes, 1 when one fails, 77 when the readers cannot be set up.
"""

import json
import math
import os
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, "build", "tb-readers-venv")
PACKAGES = ["tensorboard", "tbparse"]


def ensure_readers():
    try:
        import tbparse  # noqa: F401
        import tensorboard  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get("TROUPE_TB_VENV_ACTIVE"):
        print("SKIP: tensorboard and tbparse are not importable even in " + VENV, file=sys.stderr)
        sys.exit(77)
    py = os.path.join(VENV, "bin", "python")
    try:
        if not os.path.exists(py):
            subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "--retries", "1", "--timeout", "30"] + PACKAGES,
                       check=True)
    except (subprocess.CalledProcessError, OSError) as e:
        print("SKIP: cannot set up " + VENV + " with " + " and ".join(PACKAGES) + ": " + str(e), file=sys.stderr)
        sys.exit(77)
    env = dict(os.environ, TROUPE_TB_VENV_ACTIVE="1")
    os.execve(py, [py] + sys.argv, env)


def as_float32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def same_value(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def tensorboard_points(events_dir):
    """tag -> [(step, value)] as TensorBoard plots them."""
    from tensorboard.backend.event_processing import event_accumulator
    acc = event_accumulator.EventAccumulator(events_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()[event_accumulator.SCALARS]}


def tbparse_points(events_dir):
    """tag -> [(step, value)] as tbparse's DataFrame holds them."""
    from tbparse import SummaryReader
    frame = SummaryReader(events_dir).scalars
    points = {}
    for step, tag, value in zip(frame["step"], frame["tag"], frame["value"]):
        points.setdefault(str(tag), []).append((int(step), float(value)))
    return points


def last_step_lines(metrics_path):
    """step -> the last "step" line of metrics.jsonl for it."""
    last = {}
    with open(metrics_path) as f:
        for line in f:
            if not line.endswith("\n"):
                break  # an unterminated last line: a crash's, not a record
            j = json.loads(line)
            if j.get("type") == "step":
                last[j["step"]] = j
    return last


def check(run_dir):
    events_dir = os.path.join(run_dir, "events")
    failures = []
    readers = {"TensorBoard": tensorboard_points(events_dir), "tbparse": tbparse_points(events_dir)}
    for name, points in readers.items():
        for tag, list_ in sorted(points.items()):
            steps = [s for s, _ in list_]
            twice = sorted({s for s in steps if steps.count(s) > 1})
            if twice:
                failures.append(f"{name} shows steps {twice} of '{tag}' more than once")
    tb, tp = readers["TensorBoard"], readers["tbparse"]
    if sorted(tb) != sorted(tp):
        failures.append(f"the readers show different tags: TensorBoard {sorted(tb)}, tbparse {sorted(tp)}")
    for tag in sorted(set(tb) & set(tp)):
        a, b = sorted(tb[tag]), sorted(tp[tag])
        if len(a) != len(b) or any(sa != sb or not same_value(va, vb) for (sa, va), (sb, vb) in zip(a, b)):
            only_tb = sorted(set(a) - set(b))[:5]
            only_tp = sorted(set(b) - set(a))[:5]
            failures.append(f"'{tag}': TensorBoard {len(a)} points, tbparse {len(b)}; "
                            f"only in TensorBoard {only_tb}, only in tbparse {only_tp}")

    last = last_step_lines(os.path.join(run_dir, "metrics.jsonl"))
    want = [(s, as_float32(float(last[s]["loss"]))) for s in sorted(last)]
    if [s for s, _ in want] != list(range(1, len(want) + 1)):
        failures.append(f"metrics.jsonl's steps are not 1..N: {sorted(last)}")
    for name, points in readers.items():
        got = sorted(points.get("loss", []))
        if len(got) != len(want) or any(sg != sw or not same_value(vg, vw) for (sg, vg), (sw, vw) in zip(got, want)):
            wrong = [(sg, vg, vw) for (sg, vg), (sw, vw) in zip(got, want) if sg != sw or not same_value(vg, vw)][:5]
            failures.append(f"{name}'s loss curve is not metrics.jsonl's final timeline: {len(got)} points for "
                            f"{len(want)} steps; first differences (step, shown, last line) {wrong}")

    for f in failures:
        print("FAIL " + f)
    counts = ", ".join(f"{tag} {len(tb[tag])}" for tag in sorted(tb))
    print(f"tb_readers_check: {run_dir}: {len(want)} steps; points per tag in both readers: {counts}; "
          f"{len(failures)} failed")
    return 1 if failures else 0


def main(argv):
    if len(argv) != 2:
        print("usage: tb_readers_check.py RUN_DIR", file=sys.stderr)
        return 1
    run_dir = argv[1]
    for need in ("events", "metrics.jsonl"):
        if not os.path.exists(os.path.join(run_dir, need)):
            print(f"{os.path.join(run_dir, need)}: no such file or directory", file=sys.stderr)
            return 1
    ensure_readers()
    return check(run_dir)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
