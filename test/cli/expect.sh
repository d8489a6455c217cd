# Sourced by the test/cli scripts that drive `supervisor` from outside. They set `work`
# (their folder) and `fails` (a count) first.
#
# expect NAME WANT_RC PATTERN -- COMMAND...: runs COMMAND, checks its exit status and that
# its output (in $work/NAME.out) holds PATTERN (a fixed string); a miss prints the
# output's tail, counts in `fails` and returns 1.
expect() {
  local name=$1 want=$2 pattern=$3
  shift 4
  "$@" >"$work/$name.out" 2>&1
  local rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -qF -- "$pattern" "$work/$name.out"; then
    echo "FAIL $name: exit $rc (want $want), output should hold: $pattern"
    tail -n 20 "$work/$name.out"
    fails=$((fails + 1))
    return 1
  fi
  echo "ok   $name: exit $rc, says: $(grep -F -- "$pattern" "$work/$name.out" | head -n 1 | cut -c1-160)"
}
