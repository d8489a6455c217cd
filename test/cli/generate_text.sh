#!/usr/bin/env bash
# `supervisor generate` with text, end to end: a Llama trained 20 updates on a dataset that
# prepare-data wrote with the Llama-3-style fixture tokenizer.json (HF_JSON), then
#   - --prompt TEXT --print-ids: the prompt ids are HF tokenizers' add_special_tokens=True
#     ids of TEXT (<|begin_of_text|> first; test/data/fixtures/hf/extras_expected.json);
#   - --prompt-ids of those ids prints the same continuation, token for token, and text;
#   - the checkpoint and its export (with the tokenizer.json the export writes) agree;
#   - --no-special-tokens drops the BOS; a model without a tokenizer, an unknown
#     --device and --device cuda in a build without CUDA each fail with one clear line.
# Usage: generate_text.sh SUPERVISOR WORKDIR
set -uo pipefail
supervisor=$1
work=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
tok=$src/test/data/fixtures/hf/llama3_style.tokenizer.json
rm -rf "$work"
mkdir -p "$work"
fails=0
fail() { echo "FAIL $1"; shift; for f in "$@"; do cat "$f"; done; fails=$((fails + 1)); }

"$supervisor" prepare-data --quiet --input "$src/docs" --format blank-lines --tokenizer hf --tokenizer-file "$tok" \
  --output "$work/data/docs" >"$work/prepare.out" 2>&1 || { fail "prepare-data" "$work/prepare.out"; exit 1; }
"$supervisor" run "$src/configs/llama-tiny.textproto" --quiet --set data.tokenizer=HF_JSON \
  --set data.tokenizer_file="$tok" --set data.prefix="$work/data/docs" --set model.vocab_size=901 \
  --set training.train_samples=320 --set lr_schedule.warmup_samples=32 --set training.eval_interval=0 --set training.eval_samples=16 \
  --set logging.tensorboard=false --set logging.run_dir="$work/run" >"$work/run.out" 2>&1 ||
  { fail "run" "$work/run.out"; exit 1; }
ckpt=$work/run/checkpoints

want=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
c = next(c for c in d["cases"] if c["text"] == "Hello world")
print(" ".join(map(str, c["ids_special"]["llama3_style"])))' "$src/test/data/fixtures/hf/extras_expected.json")
"$supervisor" generate "$ckpt" --prompt "Hello world" --max-tokens 20 --print-ids >"$work/text.out" 2>&1 ||
  fail "generate --prompt: exit $?" "$work/text.out"
grep -qxF "prompt ids: $want" "$work/text.out" || fail "prompt ids are not HF's ($want)" "$work/text.out"
grep -q "^text: <|begin_of_text|>Hello world" "$work/text.out" || fail "text line" "$work/text.out"
ids=$(sed -n 's/^prompt ids: //p' "$work/text.out" | tr ' ' ',')
"$supervisor" generate "$ckpt" --prompt-ids "$ids" --max-tokens 20 --print-ids >"$work/ids.out" 2>&1 ||
  fail "generate --prompt-ids: exit $?" "$work/ids.out"
cmp -s "$work/text.out" "$work/ids.out" || fail "--prompt and --prompt-ids of its ids differ" "$work/text.out" "$work/ids.out"

"$supervisor" export "$ckpt" --out "$work/hf" >"$work/export.out" 2>&1 || fail "export" "$work/export.out"
"$supervisor" generate "$work/hf" --prompt "Hello world" --max-tokens 20 --print-ids --ignore-eod >"$work/hf.out" 2>&1 ||
  fail "generate on the export: exit $?" "$work/hf.out"
"$supervisor" generate "$ckpt" --prompt "Hello world" --max-tokens 20 --print-ids --ignore-eod >"$work/ckpt.out" 2>&1
cmp -s "$work/hf.out" "$work/ckpt.out" || fail "the export and its checkpoint differ" "$work/ckpt.out" "$work/hf.out"

"$supervisor" generate "$ckpt" --prompt "Hello world" --max-tokens 1 --print-ids --no-special-tokens >"$work/nobos.out" 2>&1
grep -qxF "prompt ids: ${want#0 }" "$work/nobos.out" || fail "--no-special-tokens" "$work/nobos.out"

rm "$work/hf/tokenizer.json"
"$supervisor" generate "$work/hf" --prompt "Hello" >"$work/none.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -qF "supervisor generate: --prompt TEXT needs a tokenizer, and $work/hf has no tokenizer.json (nor GPT-2's vocab.json + merges.txt); give --tokenizer FILE (a tokenizer.json) or --prompt-ids" "$work/none.out" ||
  fail "no tokenizer: exit $rc" "$work/none.out"
"$supervisor" generate "$work/hf" --prompt "Hello world" --tokenizer "$tok" --max-tokens 20 --print-ids --ignore-eod >"$work/given.out" 2>&1
cmp -s "$work/given.out" "$work/ckpt.out" || fail "--tokenizer FILE" "$work/given.out" "$work/ckpt.out"
"$supervisor" generate "$ckpt" --prompt "x" --device tpu >"$work/tpu.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -qF "supervisor generate: --device must be cpu or cuda, not 'tpu'" "$work/tpu.out" || fail "--device tpu: exit $rc" "$work/tpu.out"
"$supervisor" generate "$ckpt" --prompt "Hello world" --max-tokens 20 --print-ids --device cuda >"$work/cuda.out" 2>&1
rc=$?
if grep -qF "this supervisor was built without CUDA" "$work/cuda.out" || grep -qF "no usable GPU" "$work/cuda.out"; then
  [ $rc -eq 1 ] || fail "--device cuda without a GPU: exit $rc" "$work/cuda.out"
  echo "SKIPPED: --device cuda: $(cat "$work/cuda.out")"
else
  # bf16 GEMM operands: the same prompt ids; the continuation may differ where two logits are close.
  [ $rc -eq 0 ] && grep -qxF "prompt ids: $want" "$work/cuda.out" || fail "--device cuda: exit $rc" "$work/cuda.out"
fi

[ $fails -eq 0 ] && echo "generate_text: all checks passed" || echo "generate_text: $fails failed"
[ $fails -eq 0 ]
