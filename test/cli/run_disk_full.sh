#!/usr/bin/env bash
# `supervisor run` when the disk fills up, on small tmpfs mounts in a private mount
# namespace (unshare: as root, or with unprivileged user namespaces), so nothing outside
# the test's folder is touched. Every case must end by itself with exit 1 and one error
# naming the failed saves and the newest complete checkpoint, never hang; `latest` stays
# a checkpoint that inspect verifies, no partial directory is left, metrics.jsonl holds no
# torn line, and a resume once there is room continues bitwise.
# Usage: run_disk_full.sh SUPERVISOR WORKDIR. Exit 77 (CTest: skipped) when no tmpfs
# can be mounted here.
set -uo pipefail
supervisor=$1
work=$2

# Inside the namespace: mount a tmpfs of SIZE on DIR, then run the rest.
if [ "${1:-}" = "--in-tmpfs" ]; then
  size=$2 dir=$3
  shift 3
  mkdir -p "$dir"
  mount -t tmpfs -o "size=$size" tmpfs "$dir" || exit 3
  exec "$@"
fi
in_tmpfs() {  # in_tmpfs SIZE DIR COMMAND...: COMMAND with a tmpfs of SIZE on DIR
  unshare -rm bash "$0" --in-tmpfs "$@"
}

rm -rf "$work"
mkdir -p "$work"
if ! in_tmpfs 1m "$work/probe" true 2>"$work/probe.err"; then
  echo "SKIPPED: no tmpfs can be mounted in a private namespace here: $(head -c 300 "$work/probe.err")"
  exit 77
fi
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# The embedded default, cut to 12 updates of 16 samples, no evaluation, a checkpoint
# every step (keep all of them unless a case says otherwise).
steps=(--quiet --set training.train_samples=192 --set lr_schedule.warmup_samples=32 --set training.eval_interval=0
       --set training.eval_samples=0 --set checkpoint.interval_steps=1 --set checkpoint.keep_last=10)

# The reference: the same run with room enough, and the size of one of its checkpoints.
"$supervisor" run "${steps[@]}" --set logging.run_dir="$work/ref" >"$work/ref.out" 2>&1 ||
  { echo "FAIL reference run: $(tail -n 5 "$work/ref.out")"; exit 1; }
one=$(du -sb "$work/ref/checkpoints/step_00000012" | cut -f1)
[ -n "$one" ] || { echo "FAIL reference run: no checkpoint of step 12"; exit 1; }
# Room for two and a half checkpoints: saves 1 and 2 fit, 3, 4 and 5 fail, and after
# three failures in a row (checkpoint.max_failed_saves) the run stops after step 5.
room=$(((one * 5 / 2 + 4095) / 4096 * 4096))
echo "one checkpoint: $one bytes; tmpfs of $room bytes"

# steps_of FILE: the step records of a metrics.jsonl as "step loss" lines (the loss as
# written, so equal text is equal bits).
steps_of() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    if o["type"] == "step": print(o["step"], o["loss"])' "$1"
}
# no_torn_lines FILE: every line is a whole JSON object ending in a newline.
no_torn_lines() {
  python3 -c '
import json, sys
data = open(sys.argv[1], "rb").read()
assert data.endswith(b"\n"), "last line unterminated"
for n, line in enumerate(data.split(b"\n")[:-1], 1):
    assert isinstance(json.loads(line), dict), "line %d" % n' "$1"
}

# check_stopped NAME OUT RC NEWEST: exit 1, the one error line, no partial directory.
check_stopped() {
  local name=$1 out=$2 rc=$3 newest=$4
  [ "$rc" -eq 1 ] || fail "$name: exit $rc (want 1): $(tail -n 5 "$out")"
  grep -qF "checkpoint(s) in a row failed (checkpoint.max_failed_saves = 3)" "$out" ||
    fail "$name: no line naming the failed saves: $(tail -n 5 "$out")"
  grep -qF "the newest complete checkpoint is $newest" "$out" ||
    fail "$name: the error does not name the newest checkpoint $newest: $(grep -F 'training failed' "$out")"
  grep -qF "No space left on device" "$out" || fail "$name: the cause is not said"
  grep -qF "a checkpoint of this run needs about" "$out" || fail "$name: the space needed is not said"
  echo "ok   $name: exit $rc, says: $(grep -F 'training failed' "$out" | head -n 1 | cut -c1-220)"
}

# 1. The checkpoint root fills up mid-run (keep_last 10). Inside the namespace: the run,
#    then inspect of what `latest` names and a copy of the root to resume from outside.
cat >"$work/full-root.sh" <<EOF
set -u
timeout 300 "$supervisor" run ${steps[*]} --set logging.run_dir="$work/a" --set checkpoint.dir="$work/a-ckpt" \
  >"$work/a.out" 2>&1
echo \$? >"$work/a.rc"
ls -a "$work/a-ckpt" >"$work/a.ls"
"$supervisor" inspect "$work/a-ckpt" >"$work/a.inspect" 2>&1
echo \$? >"$work/a.inspect.rc"
cp -a "$work/a-ckpt/." "$work/a-copy/"
EOF
mkdir -p "$work/a-copy"
in_tmpfs "$room" "$work/a-ckpt" bash "$work/full-root.sh"
check_stopped full-root "$work/a.out" "$(cat "$work/a.rc")" "$work/a-ckpt/step_00000002"
grep -q "partial" "$work/a.ls" && fail "full-root: partial directories left: $(tr '\n' ' ' <"$work/a.ls")"
[ "$(cat "$work/a.inspect.rc")" -eq 0 ] || fail "full-root: inspect of latest failed: $(tail -n 3 "$work/a.inspect")"
[ "$(cat "$work/a-copy/latest")" = "step_00000002" ] || fail "full-root: latest is $(cat "$work/a-copy/latest")"
[ "$(grep -c '"type":"checkpoint_failed"' "$work/a/metrics.jsonl")" -eq 3 ] ||
  fail "full-root: want 3 checkpoint_failed lines, got $(grep -c '"type":"checkpoint_failed"' "$work/a/metrics.jsonl")"
# Step 6 may have gone out with step 5's update, before step 5's save failed: it runs.
case "$(steps_of "$work/a/metrics.jsonl" | tail -n 1 | cut -d' ' -f1)" in
  5 | 6) ;;
  *) fail "full-root: the run should stop after step 5 or 6; its last step: $(steps_of "$work/a/metrics.jsonl" | tail -n 1)" ;;
esac
# Resumed where there is room: steps 3-12 bitwise as the run that never filled its disk.
"$supervisor" run "${steps[@]}" --set logging.run_dir="$work/a2" --set checkpoint.dir="$work/a-copy" \
  --set checkpoint.load=latest >"$work/a2.out" 2>&1 || fail "full-root resume: $(tail -n 5 "$work/a2.out")"
if diff <(steps_of "$work/ref/metrics.jsonl" | sed -n '3,12p') <(steps_of "$work/a2/metrics.jsonl") >"$work/a2.diff"; then
  echo "ok   full-root resume: steps 3-12 bitwise as the run with room"
else
  fail "full-root resume: losses differ from the reference: $(head -n 4 "$work/a2.diff")"
fi

# 2. keep_last 2 on a root that holds two checkpoints and not a third (pruning comes after
#    a commit): the third save fails, and so do the two after it.
cat >"$work/keep2.sh" <<EOF
timeout 300 "$supervisor" run ${steps[*]} --set checkpoint.keep_last=2 --set logging.run_dir="$work/b" \
  --set checkpoint.dir="$work/b-ckpt" >"$work/b.out" 2>&1
echo \$? >"$work/b.rc"
ls -a "$work/b-ckpt" >"$work/b.ls"
EOF
in_tmpfs "$room" "$work/b-ckpt" bash "$work/keep2.sh"
check_stopped keep-last-2 "$work/b.out" "$(cat "$work/b.rc")" "$work/b-ckpt/step_00000002"
grep -q "partial" "$work/b.ls" && fail "keep-last-2: partial directories left"

# 3. A root that is full before the run starts: a warning at start naming what is free
#    and what keep_last + 1 checkpoints need, then three failed saves and the stop.
cat >"$work/full-start.sh" <<EOF
dd if=/dev/zero of="$work/c-ckpt/filler" bs=4096 count=\$(( $room / 4096 )) 2>/dev/null
timeout 300 "$supervisor" run ${steps[*]} --set logging.run_dir="$work/c" --set checkpoint.dir="$work/c-ckpt" \
  >"$work/c.out" 2>&1
echo \$? >"$work/c.rc"
EOF
in_tmpfs "$room" "$work/c-ckpt" bash "$work/full-start.sh"
check_stopped full-at-start "$work/c.out" "$(cat "$work/c.rc")" "none"
grep -qF "less than the" "$work/c.out" && grep -qF "11 checkpoint(s) of about" "$work/c.out" ||
  fail "full-at-start: no warning at start naming the space: $(grep -F 'checkpoint:' "$work/c.out" | head -n 2)"

# 4. The whole run directory on a tmpfs that fills up (metrics.jsonl, events,
#    checkpoints): the run ends by itself with exit 1, and metrics.jsonl holds no torn line.
cat >"$work/full-run-dir.sh" <<EOF
timeout 300 "$supervisor" run ${steps[*]} --set logging.run_dir="$work/d" >"$work/d.out" 2>&1
echo \$? >"$work/d.rc"
cp "$work/d/metrics.jsonl" "$work/d-metrics.jsonl"
ls -a "$work/d/checkpoints" >"$work/d.ls"
EOF
in_tmpfs "$room" "$work/d" bash "$work/full-run-dir.sh"
rc=$(cat "$work/d.rc")
if [ "$rc" -ne 1 ]; then
  fail "full-run-dir: exit $rc (want 1): $(tail -n 5 "$work/d.out")"
elif ! no_torn_lines "$work/d-metrics.jsonl" 2>"$work/d.torn"; then
  fail "full-run-dir: metrics.jsonl: $(tail -n 1 "$work/d.torn")"
elif grep -q "partial" "$work/d.ls"; then
  fail "full-run-dir: partial directories left"
else
  echo "ok   full-run-dir: exit 1, says: $(grep -F 'training failed' "$work/d.out" | head -n 1 | cut -c1-220)"
fi

# 5. A checkpoint root that is a mount point of its own, holding an earlier run's
#    checkpoints and a file that is not troupe's: a fresh start cannot rename the root
#    (EBUSY), so the earlier entries move into ROOT/previous-<time>/ and the run goes on.
cat >"$work/mount-root.sh" <<EOF
cp -a "$work/ref/checkpoints/." "$work/e-ckpt/"
touch "$work/e-ckpt/not-troupes"
timeout 300 "$supervisor" run ${steps[*]} --set checkpoint.keep_last=2 --set logging.run_dir="$work/e" \
  --set checkpoint.dir="$work/e-ckpt" >"$work/e.out" 2>&1
echo \$? >"$work/e.rc"
ls "$work/e-ckpt" "$work/e-ckpt"/previous-* >"$work/e.ls" 2>&1
EOF
in_tmpfs 200m "$work/e-ckpt" bash "$work/mount-root.sh"
if [ "$(cat "$work/e.rc")" -ne 0 ]; then
  fail "mount-root: exit $(cat "$work/e.rc"): $(tail -n 3 "$work/e.out")"
elif ! grep -q "^step_00000012$" "$work/e.ls" || ! grep -q "^not-troupes$" "$work/e.ls" ||
  [ "$(grep -c '^step_000000' "$work/e.ls")" -ne 12 ]; then
  fail "mount-root: want the run's 2 checkpoints, the earlier 10 under previous-*, the stray file kept: $(tr '\n' ' ' <"$work/e.ls")"
else
  echo "ok   mount-root: says: $(grep -F 'were moved to' "$work/e.out" | cut -c1-200)"
fi

echo "$fails failed"
[ "$fails" -eq 0 ]
