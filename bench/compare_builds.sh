#!/usr/bin/env bash
# Step throughput of two builds of supervisor, alternated on one machine: a refactor that
# must not cost time shows ratios within noise. Models: tiny and small (runtime_bench's)
# and gpt2-124m's shape (configs/gpt2-124m.textproto) at 64 tokens x 4 sequences a step
# (step_bench's case), DP1 x PP1, the embedded default (byte) data; each run's median step_time_s after 3 warm-up steps, then per
# model the median over the pairs of each build and of the per-pair ratios (new / old).
# Usage: bench/compare_builds.sh OLD_SUPERVISOR NEW_SUPERVISOR [PAIRS (3)] [WORK_DIR]
set -euo pipefail
old=$1
new=$2
pairs=${3:-3}
work=${4:-$(mktemp -d)}
mkdir -p "$work"
cd "$(dirname "$0")/.."
common=(--quiet --set parallel.data=1 --set parallel.pipeline=1 --set logging.tensorboard=false --set checkpoint.save_on_exit=false --set checkpoint.interval_steps=0
        --set training.eval_interval=0)
declare -A model
model[tiny]="--set model.layers=2 --set model.heads=4 --set model.width=64 --set model.vocab_size=257
  --set model.max_positions=64 --set batch.seq_length=64 --set batch.micro_batch_size=8 --set batch.global_batch_size=8
  --set training.train_samples=320 --set lr_schedule.warmup_samples=8"
model[small]="--set model.layers=4 --set model.heads=4 --set model.width=256 --set model.vocab_size=4096
  --set model.max_positions=128 --set batch.seq_length=128 --set batch.micro_batch_size=8
  --set batch.global_batch_size=8 --set training.train_samples=160 --set lr_schedule.warmup_samples=8"
model[gpt2-124m]="--set model.layers=12 --set model.heads=12 --set model.width=768 --set model.vocab_size=50257
  --set model.max_positions=1024 --set batch.seq_length=64 --set batch.micro_batch_size=4
  --set batch.global_batch_size=4 --set training.train_samples=48 --set lr_schedule.warmup_samples=4"
median_step() {
  python3 - "$1" <<'PY'
import json, statistics, sys
t = [json.loads(l)["step_time_s"] for l in open(sys.argv[1]) if '"type":"step"' in l.replace(" ", "")]
print(statistics.median(t[3:]))
PY
}
for name in tiny small gpt2-124m; do
  # shellcheck disable=SC2206
  args=(${model[$name]})
  olds=() news=() ratios=()
  for p in $(seq 1 "$pairs"); do
    for build in old new; do
      sup=$old; [ "$build" = new ] && sup=$new
      dir="$work/$name-$build-$p"
      "$sup" run "${args[@]}" "${common[@]}" --set logging.run_dir="$dir" >"$dir.log" 2>&1 ||
        { echo "$name $build run failed: $dir.log"; tail -n 5 "$dir.log"; exit 1; }
    done
    o=$(median_step "$work/$name-old-$p/metrics.jsonl")
    n=$(median_step "$work/$name-new-$p/metrics.jsonl")
    olds+=("$o") news+=("$n") ratios+=("$(python3 -c "print($n / $o)")")
    echo "  $name pair $p: old $o s/step, new $n s/step"
  done
  python3 - "$name" "${olds[*]}" "${news[*]}" "${ratios[*]}" <<'PY'
import statistics, sys
name, o, n, r = sys.argv[1], *[list(map(float, a.split())) for a in sys.argv[2:]]
print(f"{name}: old median {statistics.median(o):.4f} s/step, new {statistics.median(n):.4f} s/step, "
      f"median ratio new/old {statistics.median(r):.3f} (pairs: {', '.join(f'{x:.3f}' for x in r)})")
PY
done
