#!/usr/bin/env bash
# `supervisor compare` on three real runs: the embedded default cut to 12 updates with
# validation every 4, at three peak LRs. Every number the tables print for a run is
# checked against that run's own metrics.jsonl and spikes.jsonl, read here with Python
# (the final validation loss, the steps, tokens, clipped updates and spikes, the loss at
# each common token count, and the first pass reaching each run's final loss); --plot
# writes a PNG (its content: test_metrics). Then `supervisor replay` on one of the runs.
# Usage: compare.sh SUPERVISOR WORKDIR
set -uo pipefail
supervisor=$1
work=$2
rm -rf "$work"
mkdir -p "$work"

small=(--quiet --set training.train_samples=192 --set lr_schedule.warmup_samples=32 --set training.eval_interval=4
       --set training.eval_samples=16 --set checkpoint.save_on_exit=false --set logging.tensorboard=false)
for lr in 1e-3 3e-3 1e-2; do
  "$supervisor" run "${small[@]}" --set optimizer.lr=$lr --set logging.run_dir="$work/lr-$lr" >"$work/run-$lr.out" 2>&1 ||
    { echo "FAIL run lr=$lr: exit $?"; tail -n 20 "$work/run-$lr.out"; exit 1; }
done

(cd "$work" && "$supervisor" compare lr-1e-3 lr-3e-3 lr-1e-2) >"$work/compare.out" 2>&1 ||
  { echo "FAIL compare: exit $?"; cat "$work/compare.out"; exit 1; }
cat "$work/compare.out"

fails=0
"$supervisor" compare "$work/lr-1e-3" "$work/lr-1e-2" --plot "$work/plot.png" >"$work/plot.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(head -c 8 "$work/plot.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] &&
  grep -qF "plot: $work/plot.png (1 = $work/lr-1e-3, #1f77b4; 2 = $work/lr-1e-2, #d62728)" "$work/plot.out" ||
  { echo "FAIL plot: exit $rc"; cat "$work/plot.out"; fails=$((fails + 1)); }
"$supervisor" compare >"$work/none.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -qF "supervisor compare: no RUN_DIR given" "$work/none.out" ||
  { echo "FAIL no run: exit $rc"; cat "$work/none.out"; fails=$((fails + 1)); }
"$supervisor" compare "$work/lr-1e-3" "$work/nowhere" >"$work/missing.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -qF "supervisor compare: $work/nowhere/metrics.jsonl: no such file" "$work/missing.out" ||
  { echo "FAIL missing run: exit $rc"; cat "$work/missing.out"; fails=$((fails + 1)); }

python3 - "$work" <<'PY' || fails=$((fails + 1))
import json, os, sys
work = sys.argv[1]
runs = ["lr-1e-3", "lr-3e-3", "lr-1e-2"]
text = open(os.path.join(work, "compare.out")).read()
lines = text.splitlines()
bad = []
def expect(cond, what):
    if not cond: bad.append(what)

expect(lines[0] == "3 runs, aligned by input tokens (samples x seq_length)", "first line: " + lines[0])
evals = {}
for r in runs:
    objs = [json.loads(l) for l in open(os.path.join(work, r, "metrics.jsonl"))]
    steps = {o["step"]: o for o in objs if o["type"] == "step"}
    tokens = {0: 0}
    total = 0
    for n in sorted(steps):
        total += steps[n]["input_tokens"]
        tokens[n] = total
    ev = [(tokens[o["step"]], o["loss"]) for o in objs if o["type"] == "eval"]
    evals[r] = ev
    spikes_path = os.path.join(work, r, "spikes.jsonl")
    spikes = len({json.loads(l)["step"] for l in open(spikes_path)}) if os.path.exists(spikes_path) else 0
    clipped = sum(1 for o in steps.values() if o["clipped"])
    row = lines[3 + runs.index(r)]  # after the first line, a blank one and the header
    expect(row.startswith(r + " "), r + ": summary row " + row)
    f = row.split()
    # run steps tokens train-loss val-loss tok/s [prefix] train-time wall spikes skipped clipped
    expect(f[1] == str(len(steps)), r + ": steps " + f[1])
    expect(f[2] == "{:,}".format(total), r + ": tokens " + f[2])
    expect(f[3] == "%.4f" % steps[max(steps)]["loss"], r + ": train loss " + f[3])
    expect(f[4] == "%.4f" % ev[-1][1], r + ": val loss " + f[4])
    expect(f[-3:] == [str(spikes), "0", str(clipped)], r + ": spikes/skipped/clipped " + " ".join(f[-3:]))

# Validation loss at equal tokens: the three runs share the batch, so every row is a
# measured pass of each run (no "~").
start = lines.index("validation loss at equal tokens (~: interpolated between the run's passes)")
grid = [t for t, _ in evals[runs[0]]]
expect(lines[start + 1].split() == ["tokens"] + runs, "grid header: " + lines[start + 1])
for i, t in enumerate(grid):
    f = lines[start + 2 + i].split()
    expect(f == ["{:,}".format(t)] + ["%.4f" % dict(evals[r])[t] for r in runs], "grid row: " + lines[start + 2 + i])

# Tokens to reach each run's final validation loss: the first pass at or below it.
start = lines.index("tokens (wall time) to reach each run's final validation loss (-: not reached)")
for i, target in enumerate(runs):
    loss = evals[target][-1][1]
    row = lines[start + 2 + i]
    expect(row.startswith(target + " " + "%.4f" % loss), "target row: " + row)
    want = []
    for r in runs:
        first = next((t for t, l in evals[r] if l <= loss), None)
        want.append("-" if first is None else "{:,}".format(first))
    got = [w for w in row.split()[2:] if not w.startswith("(")]
    expect(got == want, "reach row %s: got %s, want %s" % (target, got, want))

for b in bad: print("FAIL", b)
print("ok   compare tables agree with the runs' files" if not bad else "%d mismatches" % len(bad))
sys.exit(1 if bad else 0)
PY
# supervisor replay on one of the runs (it saved no checkpoint: from the initial
# weights): bitwise equal, exit 0; a record moved by one unit in the last place, exit 1
# naming the step and the quantity; a step the run never made, exit 1.
"$supervisor" replay "$work/lr-1e-3" --step 3 >"$work/replay.out" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -qF "bitwise equal: steps 1..3 (consumed samples, sample IDs, loss tokens, grad norm, loss, lr)" "$work/replay.out" ||
  { echo "FAIL replay: exit $rc"; cat "$work/replay.out"; fails=$((fails + 1)); }
python3 - "$work/lr-1e-3/metrics.jsonl" <<'PY'
import json, math, sys
path = sys.argv[1]
objs = [json.loads(l) for l in open(path)]
for o in objs:
    if o["type"] == "step" and o["step"] == 2:
        o["loss"] = math.nextafter(o["loss"], math.inf)
open(path, "w").write("".join(json.dumps(o) + "\n" for o in objs))
PY
"$supervisor" replay "$work/lr-1e-3" --step 3 >"$work/replay-tampered.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -qF "DIFFERENT at step 2: loss recorded" "$work/replay-tampered.out" ||
  { echo "FAIL replay of a tampered record: exit $rc"; cat "$work/replay-tampered.out"; fails=$((fails + 1)); }
"$supervisor" replay "$work/lr-1e-3" --step 99 >"$work/replay-far.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -qF "records no step 13" "$work/replay-far.out" ||
  { echo "FAIL replay past the run: exit $rc"; cat "$work/replay-far.out"; fails=$((fails + 1)); }
"$supervisor" replay "$work/lr-1e-3" >"$work/replay-usage.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -qF "supervisor replay: --step N is required" "$work/replay-usage.out" ||
  { echo "FAIL replay usage: exit $rc"; cat "$work/replay-usage.out"; fails=$((fails + 1)); }

[ $fails -eq 0 ] || exit 1
