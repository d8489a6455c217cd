#!/usr/bin/env bash
# A run resumed by a second process, read with TensorBoard's and tbparse's own readers
# (tools/tb_readers_check.py): both must show each step once, the same steps and values,
# the loss of the timeline that continued.
#   1. The embedded default cut to 24 updates, a checkpoint every 8, evaluations every 4;
#      a stage is killed before step 21 and supervision.max_restarts is 0, so the run gives
#      up: the process exits 1 having written steps 1-20, its last checkpoint step 16.
#   2. A second process resumes from that checkpoint and trains to step 24.
# metrics.jsonl is checked to hold steps 17-20 twice (the scenario happened), then the
# readers. Exits 77 (CTest's skip) when the readers cannot be installed.
# Usage: tb_readers.sh SUPERVISOR WORKDIR
set -uo pipefail
supervisor=$1
work=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
run=$work/run
rm -rf "$work"
mkdir -p "$work"

common=(--quiet --set training.train_samples=384 --set lr_schedule.warmup_samples=32 --set training.eval_interval=4
        --set training.eval_samples=16 --set checkpoint.interval_steps=8 --set logging.tensorboard=true
        --set logging.run_dir="$run")
"$supervisor" run "${common[@]}" --set supervision.max_restarts=0 --inject stage/dp0/pp0/tp0@21:forward:kill \
  >"$work/first.out" 2>&1
rc=$?
[ $rc -eq 1 ] ||
  { echo "FAIL the first run should give up at step 21 (exit 1), exit $rc"; tail -n 20 "$work/first.out"; exit 1; }
"$supervisor" run "${common[@]}" --set checkpoint.load=latest >"$work/second.out" 2>&1 ||
  { echo "FAIL the resumed run: exit $?"; tail -n 20 "$work/second.out"; exit 1; }

python3 - "$run/metrics.jsonl" <<'EOF' || exit 1
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [j["step"] for j in lines if j["type"] == "step"]
resumed = [j["resumed_from_step"] for j in lines if j["type"] == "startup"]
twice = sorted({s for s in steps if steps.count(s) > 1})
if resumed != [None, 16] or twice != [17, 18, 19, 20] or max(steps) != 24:
    print(f"FAIL not the scenario: startups resumed from {resumed}, steps written twice {twice}, last {max(steps)}")
    sys.exit(1)
EOF
ls "$run/events"
python3 "$src/tools/tb_readers_check.py" "$run"
