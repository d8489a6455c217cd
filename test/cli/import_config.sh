#!/usr/bin/env bash
# `supervisor import-config` from outside: a tiny Llama's config.json whose vocabulary
# (200 IDs) is below the byte tokenizer's 257 and whose head_dim (24) is not
# hidden_size / num_attention_heads (16) prints its model section (exit 0) with the
# tokenizer settings that fit it; pasted into a config with such a tokenizer, `supervisor
# plan` takes it. A config.json troupe cannot express still fails (exit 1), named.
# Usage: import_config.sh SUPERVISOR WORKDIR
set -uo pipefail
supervisor=$1
work=$2
rm -rf "$work"
mkdir -p "$work/tiny"
fails=0
fail() { echo "FAIL $1"; fails=$((fails + 1)); }

cat >"$work/tiny/config.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "hidden_size": 64,
 "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24,
 "num_hidden_layers": 2, "max_position_embeddings": 64, "vocab_size": 200, "rms_norm_eps": 1e-05,
 "rope_theta": 10000.0, "tie_word_embeddings": false}
EOF
echo '{}' >"$work/tiny/tokenizer.json"  # only its presence is read here

"$supervisor" import-config "$work/tiny" >"$work/tiny.out" 2>"$work/tiny.err"
rc=$?
if [ $rc -ne 0 ]; then
  fail "import-config of a 200-ID vocabulary: exit $rc"
  cat "$work/tiny.err"
else
  for want in "  vocab_size: 200" "  head_dim: 24" "  architecture: LLAMA" \
              "#   data { tokenizer: HF_JSON tokenizer_file: \"$work/tiny/tokenizer.json\" }  (the directory's own)" \
              "#   not BYTES, troupe's default: it needs 257 IDs (256 bytes + EOD), the model has 200"; do
    grep -qxF -- "$want" "$work/tiny.out" || { fail "line missing: $want"; cat "$work/tiny.out"; }
  done
  { cat "$work/tiny.out"; printf 'batch { seq_length: 32 micro_batch_size: 1 global_batch_size: 4 }\n'
    printf 'data { tokenizer: NONE prefix: "%s/none" eod_id: 0 }\n' "$work"; } >"$work/pasted.textproto"
  "$supervisor" plan "$work/pasted.textproto" >"$work/plan.out" 2>&1 ||
    { fail "plan of the pasted section: exit $?"; cat "$work/plan.out"; }
fi

# The usual head size spelled out imports as unset; a vocabulary of 257 or more fits BYTES.
sed -e 's/"head_dim": 24/"head_dim": 16/' -e 's/"vocab_size": 200/"vocab_size": 320/' "$work/tiny/config.json" \
  >"$work/usual.json"
"$supervisor" import-config "$work/usual.json" >"$work/usual.out" 2>&1 || { fail "import-config usual: exit $?"; }
grep -q "head_dim" "$work/usual.out" && { fail "head_dim 16 = 64 / 4 printed"; cat "$work/usual.out"; }
grep -qxF "#   data { tokenizer: BYTES }  (troupe's default: IDs 0-256)" "$work/usual.out" ||
  { fail "BYTES not offered for 320 IDs"; cat "$work/usual.out"; }

sed -e 's/"head_dim": 24/"head_dim": 7/' "$work/tiny/config.json" >"$work/odd.json"
"$supervisor" import-config "$work/odd.json" >"$work/odd.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -qF "$work/odd.json: model.head_dim: 7 is odd" "$work/odd.out" ||
  { fail "odd head_dim: exit $rc"; cat "$work/odd.out"; }

if [ $fails -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "import-config: all checks passed"
