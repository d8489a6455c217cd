#!/usr/bin/env bash
# Parquet inputs of prepare-data (docs/data.md, "Parquet"): a file's string column, read
# by pyarrow in a python3 child, gives the same dataset byte for byte as the same texts in
# JSON lines, on one thread and two; a missing column, a column that is not strings, a
# damaged file, an interpreter without pyarrow and one that does not start are refused
# with one error naming the file, nothing written. Sets up its own virtual environment
# with pyarrow (build/pyarrow-venv); exits 77 (skipped) with the reason when it cannot.
# Usage: parquet.sh SUPERVISOR WORKDIR
set -uo pipefail
supervisor=$1
work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
venv="$root/build/pyarrow-venv"
rm -rf "$work"
mkdir -p "$work"
fails=0
# shellcheck source=expect.sh
. "$(dirname "$0")/expect.sh"

if ! "$venv/bin/python" -c "import pyarrow" 2>/dev/null; then
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q --retries 1 --timeout 30 pyarrow; } >"$work/venv.log" 2>&1
  then
    echo "SKIP: cannot set up $venv with pyarrow: $(tail -n 1 "$work/venv.log")"
    exit 77
  fi
fi
py="$venv/bin/python"
# Four files of 500 rows each in row groups of 64: strings with non-ASCII characters,
# nulls and empty strings (skipped as empty documents, as in JSON lines), an integer column.
"$py" - "$work" <<'PY' || { echo "FAIL fixture: pyarrow could not write it"; exit 1; }
import json, sys
import pyarrow as pa, pyarrow.parquet as pq
work = sys.argv[1]
for k in range(4):
    texts = [None if i % 7 == 0 else ("" if i % 11 == 0 else "doc %d of file %d: caf\u00e9 \u4e2d\u6587 \u2014 %s" % (i, k, "x" * (i % 50)))
             for i in range(500)]
    pq.write_table(pa.table({"id": list(range(500)), "text": texts}), "%s/p%d.parquet" % (work, k), row_group_size=64)
    with open("%s/j%d.jsonl" % (work, k), "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t or ""}) + "\n")
PY
mkdir -p "$work/j" "$work/p"
mv "$work"/j?.jsonl "$work/j/"
mv "$work"/p?.parquet "$work/p/"

expect jsonl 0 "4 files, 1556 documents" -- "$supervisor" prepare-data -q -i "$work/j" -o "$work/out/j"
expect parquet-1 0 "4 files, 1556 documents" -- env TROUPE_PYTHON="$py" "$supervisor" prepare-data -q -i "$work/p" \
  -o "$work/out/p1" -j 1
expect parquet-2 0 "4 files, 1556 documents" -- env TROUPE_PYTHON="$py" "$supervisor" prepare-data -q -i "$work/p" \
  -o "$work/out/p2" -j 2
for x in p1 p2; do
  cmp -s "$work/out/j.bin" "$work/out/$x.bin" && cmp -s "$work/out/j.idx" "$work/out/$x.idx" ||
    { echo "FAIL $x: the Parquet dataset differs from the JSON lines one"; fails=$((fails + 1)); }
done

expect no-column 1 "p0.parquet: no column 'body' (its columns: id, text)" -- env TROUPE_PYTHON="$py" \
  "$supervisor" prepare-data -q -i "$work/p/p0.parquet" -o "$work/never/a" --parquet-column body
expect not-strings 1 "p0.parquet: column 'id' holds int64, not strings" -- env TROUPE_PYTHON="$py" \
  "$supervisor" prepare-data -q -i "$work/p/p0.parquet" -o "$work/never/b" --parquet-column id
head -c 2000 "$work/p/p0.parquet" >"$work/cut.parquet"
expect damaged 1 "cut.parquet: not a readable Parquet file" -- env TROUPE_PYTHON="$py" \
  "$supervisor" prepare-data -q -i "$work/cut.parquet" -o "$work/never/c"
python3 -m venv --without-pip "$work/bare-venv"
expect no-pyarrow 1 "p0.parquet: pyarrow is not importable by" -- env TROUPE_PYTHON="$work/bare-venv/bin/python" \
  "$supervisor" prepare-data -q -i "$work/p/p0.parquet" -o "$work/never/d"
expect no-python 1 "could not be started: No such file or directory" -- env TROUPE_PYTHON="$work/none/python" \
  "$supervisor" prepare-data -q -i "$work/p/p0.parquet" -o "$work/never/e"
[ -e "$work/never" ] && [ -n "$(ls -A "$work/never")" ] &&
  { echo "FAIL refusals wrote: $(ls "$work/never")"; fails=$((fails + 1)); }

[ "$fails" -eq 0 ] && echo "parquet: all checks passed" || echo "parquet: $fails check(s) failed"
exit $((fails > 0))
