#!/usr/bin/env bash
# `supervisor run` from the outside, where a start or an end goes wrong: every case must
# end with one error line naming the cause and a non-zero exit, never a hang (CTest's
# timeout) or exit 0. Usage: run_failures.sh SUPERVISOR WORKDIR
set -uo pipefail
supervisor=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
fails=0

# The embedded default, cut to 4 updates of 16 samples, a checkpoint every 2.
small=(--quiet --set training.train_samples=64 --set lr_schedule.warmup_samples=16 --set training.eval_interval=0 --set training.eval_samples=0
       --set checkpoint.interval_steps=2 --set checkpoint.keep_last=5)

source "$(dirname "$0")/expect.sh"

expect first 0 "checkpoint: step 4 saved" -- "$supervisor" run "${small[@]}" --set logging.run_dir="$work/a"
ckpt="$work/a/checkpoints"
[ -d "$ckpt/step_00000004" ] || { echo "FAIL first: no checkpoint of step 4"; exit 1; }

# export puts the run's tokenizer beside the weights (bytes: a tokenizer.json); a
# tokenizer file gone since the run fails the export, naming it, before anything is
# written.
expect export-bytes 0 "tokenizer: bytes as a byte-level BPE tokenizer.json" -- "$supervisor" export "$ckpt" --out "$work/x"
[ -s "$work/x/tokenizer.json" ] && [ -s "$work/x/tokenizer_config.json" ] ||
  { echo "FAIL export-bytes: no tokenizer.json and tokenizer_config.json"; fails=$((fails + 1)); }
src=$(cd "$(dirname "$0")/../.." && pwd)
cp "$src/test/data/fixtures/hf/llama3_style.tokenizer.json" "$work/tok.json"
"$supervisor" prepare-data --quiet -i "$src/docs" -f blank-lines -o "$work/hfdata" --tokenizer hf \
  --tokenizer-file "$work/tok.json" >/dev/null
expect hf-run 0 "checkpoint: step 4 saved" -- "$supervisor" run "${small[@]}" --set logging.run_dir="$work/n" \
  --set data.prefix="$work/hfdata" --set data.tokenizer=HF_JSON --set data.tokenizer_file="$work/tok.json" \
  --set model.vocab_size=901
rm -f "$work/tok.json"
expect export-tokenizer-gone 1 "$work/tok.json: cannot open the Hugging Face tokenizer (tokenizer.json)" -- \
  "$supervisor" export "$work/n/checkpoints" --out "$work/y"
[ ! -e "$work/y/model.safetensors" ] || { echo "FAIL export-tokenizer-gone: weights written"; fails=$((fails + 1)); }

# A damaged checkpoint named in checkpoint.load: one flipped byte in the middle of a shard.
cp -r "$work/a" "$work/b"
shard=$(ls "$work/b/checkpoints/step_00000004/"*.shard | head -n 1)
size=$(stat -c %s "$shard")
byte=$(dd if="$shard" bs=1 skip=$((size / 2)) count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
printf "$(printf '\\%03o' $(((byte + 1) % 256)))" | dd of="$shard" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
expect damaged-named 1 "damaged checkpoint" -- "$supervisor" run "${small[@]}" --set logging.run_dir="$work/b" \
  --set checkpoint.load="$work/b/checkpoints/step_00000004"

# A mistyped checkpoint.load path.
expect missing-load 1 "/nonexistent/ckpt" -- "$supervisor" run "${small[@]}" --set logging.run_dir="$work/c" \
  --set checkpoint.load=/nonexistent/ckpt

# latest over a root whose every checkpoint is damaged: no silent fresh start.
cp -r "$work/a" "$work/d"
for s in "$work/d/checkpoints/"step_*; do truncate -s 100 "$(ls "$s"/*.shard | head -n 1)"; done
expect all-damaged 1 "no checkpoint loads" -- "$supervisor" run "${small[@]}" --set logging.run_dir="$work/d" \
  --set checkpoint.load=latest
[ "$(ls -d "$work/d/checkpoints/"step_* | wc -l)" -eq 2 ] || { echo "FAIL all-damaged: checkpoints pruned"; fails=$((fails + 1)); }

# A final checkpoint whose write fails twice: the run fails, naming the newest one.
expect final-save 1 "the newest complete checkpoint is $work/e/checkpoints/step_00000002" -- \
  "$supervisor" run "${small[@]}" --set logging.run_dir="$work/e" \
  --inject writer/dp0/pp0/tp0@4:checkpoint_write:fail_write --inject writer/dp0/pp0/tp0@4:checkpoint_write:fail_write

# A slow coordinator (fault kind delay) is not a failure: the run completes, saying so;
# a delay that is not a number of seconds, or out of bounds, is refused.
expect inject-delay 0 "injected delay of 0.050 s at step 2 during checkpoint_write" -- \
  "$supervisor" run "${small[@]}" --set logging.run_dir="$work/n" --inject coordinator@2:checkpoint_write:delay:0.05
expect inject-delay-word 2 "--inject coordinator@2:checkpoint_write:delay:soon: delay 'soon' is not a number of seconds" -- \
  "$supervisor" run "${small[@]}" --set logging.run_dir="$work/n2" --inject coordinator@2:checkpoint_write:delay:soon
expect inject-delay-zero 2 "faults.fault[0].delay_s: must be more than 0 and at most 60 (seconds the actor sleeps), got 0" -- \
  "$supervisor" run "${small[@]}" --set logging.run_dir="$work/n3" --inject coordinator@2:checkpoint_write:delay:0

# Where a regular file is expected: a directory, a device or /proc/self/mem (size 0, and
# unreadable) as the config; a device as the secret; `latest` linked to /dev/zero.
expect config-dir 2 "config file is a directory, not a regular file" -- "$supervisor" run "$work"
expect plan-dir 2 "config file is a directory, not a regular file" -- "$supervisor" plan "$work"
expect plan-proc-mem 2 "/proc/self/mem: cannot read the config file" -- "$supervisor" plan /proc/self/mem
expect secret-dev-zero 1 "/dev/zero: secret file is a character device" -- \
  timeout 20 "$supervisor" worker --connect 127.0.0.1:9 --secret-file /dev/zero
cp -r "$work/a" "$work/h"
ln -sfn /dev/zero "$work/h/checkpoints/latest"
expect inspect-latest-dev-zero 1 "latest: checkpoint file is a character device" -- "$supervisor" inspect "$work/h/checkpoints"

# Malformed command lines of run and worker: exit 2 with "supervisor NAME: WHAT", the
# parser's complaints pointing at --help; --help itself exits 0.
expect run-bogus 2 "supervisor run: unrecognised option '--bogus' (see supervisor run --help)" -- \
  "$supervisor" run --bogus
expect run-no-value 2 "supervisor run: the required argument for option '--inject' is missing (see supervisor run --help)" -- \
  "$supervisor" run --inject
expect run-two-configs 2 "supervisor run: too many positional options" -- "$supervisor" run a.textproto b.textproto
expect run-help 0 "usage: supervisor run [CONFIG]" -- "$supervisor" run --help
expect run-listen-local 2 "--listen 127.0.0.1:0: the config has no cluster.workers" -- \
  "$supervisor" run --quiet --listen 127.0.0.1:0 --set logging.run_dir="$work/m"
expect worker-bogus 2 "supervisor worker: unrecognised option '--bogus' (see supervisor worker --help)" -- \
  "$supervisor" worker --connect 127.0.0.1:9 --bogus
expect worker-bad-address 2 "supervisor worker: --connect 127.0.0.1:port: bad port (expected ADDR:PORT" -- \
  "$supervisor" worker --connect 127.0.0.1:port
expect run-bad-address 2 "supervisor run: --listen nowhere: no ADDR:PORT" -- \
  "$supervisor" run --quiet --listen nowhere --set cluster.workers=2 --set logging.run_dir="$work/m2"
expect worker-no-connect 2 "supervisor worker: --connect ADDR:PORT is required (see supervisor worker --help)" -- \
  "$supervisor" worker
expect worker-slots-word 2 "supervisor worker: the argument ('x') for option '--slots' is invalid" -- \
  "$supervisor" worker --connect 127.0.0.1:9 --slots x
expect worker-slots-zero 2 "supervisor worker: --slots 0: a worker needs at least one slot" -- \
  "$supervisor" worker --connect 127.0.0.1:9 --slots 0
expect worker-timeouts 2 "supervisor worker: --heartbeat-ms 100 / --connection-timeout-ms 150 / --connect-timeout 60: need" -- \
  "$supervisor" worker --connect 127.0.0.1:9 --heartbeat-ms 100 --connection-timeout-ms 150
expect worker-help 0 "usage: supervisor worker --connect ADDR:PORT" -- "$supervisor" worker --help

# Sizes the machine cannot hold are refused before anything is allocated.
expect too-big 1 "parameters and their activations need at least" -- "$supervisor" run --quiet --set model.width=1048576 \
  --set model.vocab_size=16777216 --set logging.run_dir="$work/i"
expect too-many-ranks 1 "ranks in one process" -- "$supervisor" run --quiet --set parallel.data=64 \
  --set parallel.pipeline=32 --set model.layers=32 --set batch.global_batch_size=128 --set training.eval_samples=0 \
  --set training.eval_interval=0 --set logging.run_dir="$work/j"

expect huge-threads 2 "device.threads" -- "$supervisor" run --quiet --set device.threads=2147483647 \
  --set logging.run_dir="$work/k"
expect huge-eval 2 "samples of the validation split" -- "$supervisor" run --quiet --set training.eval_samples=4000000 \
  --set logging.run_dir="$work/l"

# SIGTERM while the coordinator hangs (not watched, so it stays hung): a second SIGTERM
# ends the process at once.
"$supervisor" run "${small[@]}" --set logging.run_dir="$work/f" --set supervision.hang_timeout_s=0 \
  --inject coordinator@3:forward:hang >"$work/hang.out" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q "injected hang" "$work/hang.out" && break; sleep 0.1; done
kill -TERM "$pid"
sleep 0.5
kill -TERM "$pid"
for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
  echo "FAIL hang-sigterm: still running 5 s after the second SIGTERM"
  kill -KILL "$pid"
  fails=$((fails + 1))
else
  wait "$pid"
  rc=$?
  if [ "$rc" -eq 143 ]; then echo "ok   hang-sigterm: exit 143 after the second SIGTERM"; else
    echo "FAIL hang-sigterm: exit $rc (want 143)"
    fails=$((fails + 1))
  fi
fi

# SIGTERM while the coordinator hangs, watched: the hang is found, the group restarts,
# and the restarted coordinator stops with a final checkpoint (exit 143).
"$supervisor" run "${small[@]}" --set logging.run_dir="$work/g" --set supervision.hang_timeout_s=2 \
  --set supervision.heartbeat_interval_s=0.1 --inject coordinator@3:forward:hang >"$work/hang2.out" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q "injected hang" "$work/hang2.out" && break; sleep 0.1; done
kill -TERM "$pid"
wait "$pid"
rc=$?
if [ "$rc" -eq 143 ] && grep -q "hung" "$work/hang2.out"; then echo "ok   hang-watched: exit 143, the hang found"; else
  echo "FAIL hang-watched: exit $rc (want 143)"
  tail -n 20 "$work/hang2.out"
  fails=$((fails + 1))
fi

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
