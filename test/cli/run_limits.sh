#!/usr/bin/env bash
# `supervisor run` on a short machine and against a closing console: too few file
# descriptors or too little address space end in one clear error and exit 1 (never an
# abort or a hang); a closed standard output stops the console and nothing else; SIGHUP
# stops as SIGTERM does (a final checkpoint, exit 129); checkpoint writers that fail, hang
# or lag cost at most their save, and the run completes.
# Usage: run_limits.sh SUPERVISOR WORKDIR
set -uo pipefail
supervisor=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# The embedded default, cut to 12 updates of 16 samples, no evaluation.
small=(--quiet --set training.train_samples=192 --set lr_schedule.warmup_samples=32 --set training.eval_interval=0
       --set training.eval_samples=0)
count() { grep -c "\"type\":\"$1\"" "$2"; }
latest_of() { cat "$1/checkpoints/latest" 2>/dev/null; }
no_partials() { ! ls "$1/checkpoints" | grep -q partial; }

source "$(dirname "$0")/expect.sh"

# Every writer of DP2 x PP2 fails step 3's write (as on a full disk): that save fails,
# reported once; the writers stay up and every later save commits.
inject=()
for d in 0 1; do for p in 0 1; do inject+=(--inject "writer/dp$d/pp$p/tp0@3:checkpoint_write:fail_write"); done; done
if expect all-writers-fail 0 "checkpoint of step 3 failed" -- timeout 300 "$supervisor" run "${small[@]}" \
  --set logging.run_dir="$work/a" --set checkpoint.interval_steps=3 "${inject[@]}"; then
  [ "$(count checkpoint_failed "$work/a/metrics.jsonl")" -eq 1 ] || fail "all-writers-fail: checkpoint_failed lines"
  [ "$(count checkpoint "$work/a/metrics.jsonl")" -eq 3 ] || fail "all-writers-fail: want steps 6, 9, 12 saved"
  [ "$(latest_of "$work/a")" = "step_00000012" ] || fail "all-writers-fail: latest is $(latest_of "$work/a")"
  [ "$(grep -c 'checkpoint of step 3 failed' "$work/all-writers-fail.out")" -eq 1 ] ||
    fail "all-writers-fail: the failed save should be reported once"
  no_partials "$work/a" || fail "all-writers-fail: a partial directory is left"
fi

# A writer that hangs on step 6's copy: that save times out, the writer is replaced, and
# the saves of steps 9 and 12 go to its successor. The deadline leaves a healthy writer
# (nice 19) room to write its 2.7 MB on a machine whose cores are busy.
if expect hung-writer 0 "did not write its shard in time; replacing it" -- timeout 300 "$supervisor" run "${small[@]}" \
  --set logging.run_dir="$work/b" --set checkpoint.interval_steps=3 --set checkpoint.save_timeout_s=10 \
  --inject writer/dp0/pp0/tp0@6:optimizer:hang; then
  [ "$(latest_of "$work/b")" = "step_00000012" ] || fail "hung-writer: latest is $(latest_of "$work/b")"
  [ -d "$work/b/checkpoints/step_00000009" ] || fail "hung-writer: step 9 was not saved"
  [ "$(count checkpoint_failed "$work/b/metrics.jsonl")" -eq 1 ] || fail "hung-writer: checkpoint_failed lines"
fi

# A writer that is slow (delay) is not a failure: it writes late and every save commits.
if expect slow-writer 0 "injected delay of 1.000 s at step 6 during checkpoint_write" -- timeout 300 \
  "$supervisor" run "${small[@]}" --set logging.run_dir="$work/c" --set checkpoint.interval_steps=3 \
  --inject writer/dp0/pp0/tp0@6:checkpoint_write:delay:1; then
  [ "$(count checkpoint_failed "$work/c/metrics.jsonl")" -eq 0 ] || fail "slow-writer: a save failed"
  [ "$(count failure "$work/c/metrics.jsonl")" -eq 0 ] || fail "slow-writer: an actor failed"
fi

# A closed console: `supervisor run | head -n 1` keeps training to the end.
"$supervisor" run --set training.train_samples=192 --set lr_schedule.warmup_samples=32 --set training.eval_interval=0 \
  --set training.eval_samples=0 --set checkpoint.interval_steps=6 --set logging.run_dir="$work/d" 2>&1 | head -n 1 \
  >"$work/closed-console.out"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  fail "closed-console: exit $rc (want 0)"
elif [ "$(count step "$work/d/metrics.jsonl")" -ne 12 ] || [ "$(count console_closed "$work/d/metrics.jsonl")" -ne 1 ] ||
  [ "$(latest_of "$work/d")" != "step_00000012" ] || ! no_partials "$work/d"; then
  fail "closed-console: $(count step "$work/d/metrics.jsonl") step lines, $(count console_closed "$work/d/metrics.jsonl") console_closed, latest $(latest_of "$work/d")"
else
  echo "ok   closed-console: exit 0, 12 steps and the final checkpoint written after the console closed"
fi

# SIGHUP (a closed terminal): stops after the current step with a final checkpoint, 129.
"$supervisor" run --quiet --set training.train_samples=16000 --set training.eval_interval=0 --set training.eval_samples=0 \
  --set logging.run_dir="$work/e" >"$work/hangup.out" 2>&1 &
pid=$!
for _ in $(seq 1 600); do [ -f "$work/e/metrics.jsonl" ] && grep -q '"type":"step"' "$work/e/metrics.jsonl" && break; sleep 0.1; done
kill -HUP "$pid"
wait "$pid"
rc=$?
last=$(grep '"type":"step"' "$work/e/metrics.jsonl" | tail -n 1 | sed 's/.*"step":\([0-9]*\).*/\1/')
if [ "$rc" -ne 129 ]; then
  fail "hangup: exit $rc (want 129): $(tail -n 3 "$work/hangup.out")"
elif [ "$(latest_of "$work/e")" != "$(printf 'step_%08d' "$last")" ] || ! no_partials "$work/e"; then
  fail "hangup: latest $(latest_of "$work/e"), last step $last"
else
  echo "ok   hangup: exit 129 after step $last, saved as $(latest_of "$work/e")"
fi

# Too few file descriptors: one error naming what could not be opened, exit 1, no hang.
# The limits count from the descriptors this script inherited (a test runner may pass
# some on), so that the dynamic loader always has the one it needs to start the binary.
inherited=$(($(ls /proc/self/fd | wc -l) - 1))  # less ls's own handle on the folder
for extra in 1 3 5 9 13; do
  n=$((inherited + extra))
  # The limit is set by the shell timeout starts, so that timeout itself is not short of them.
  timeout 120 bash -c 'ulimit -n "$0" && exec "$@"' "$n" "$supervisor" run "${small[@]}" \
    --set logging.run_dir="$work/f$n" --set checkpoint.interval_steps=3 >"$work/fds-$n.out" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "ok   fds-$n: the run fits in $n descriptors"
  elif [ "$rc" -ne 1 ]; then
    fail "fds-$n: exit $rc (want 1, or 0): $(tail -n 3 "$work/fds-$n.out")"
  elif ! grep -qE "Too many open files|file descriptors" "$work/fds-$n.out"; then
    fail "fds-$n: the error does not say what ran out: $(tail -n 3 "$work/fds-$n.out")"
  else
    echo "ok   fds-$n: exit 1, says: $(grep -E 'Too many open files|file descriptors' "$work/fds-$n.out" | head -n 1 | cut -c1-180)"
  fi
done

# Too little address space: refused at start naming the limit and what the run maps
# (engine/host_capacity.h), or the run fits (exit 0); never an abort (134) or a hang.
# Below about 0.95 GB the dynamic loader itself cannot map the CUDA libraries the binary
# links, before troupe runs: not tried here.
for kb in 1000000 1400000 1800000 2200000 3000000; do
  timeout 120 bash -c 'ulimit -v "$0" && exec "$@"' "$kb" "$supervisor" run "${small[@]}" \
    --set logging.run_dir="$work/g$kb" --set checkpoint.interval_steps=3 >"$work/mem-$kb.out" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "ok   mem-$kb: the run fits in $kb KiB of address space"
  elif [ "$rc" -ne 1 ] || grep -q "terminate called" "$work/mem-$kb.out" ||
    ! grep -qE "supervisor run: (error|training failed)" "$work/mem-$kb.out"; then
    fail "mem-$kb: exit $rc (want 1 with one error, or 0): $(tail -n 3 "$work/mem-$kb.out")"
  else
    echo "ok   mem-$kb: exit 1, says: $(grep -E 'supervisor run: (error|training failed)' "$work/mem-$kb.out" | head -n 1 | cut -c1-180)"
  fi
done

echo "$fails failed"
[ "$fails" -eq 0 ]
