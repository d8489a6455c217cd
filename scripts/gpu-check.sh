#!/usr/bin/env bash
# The GPU check: on a machine with the CUDA toolkit, CMake and ninja (the lent GPU
# machines have nothing else troupe needs), finds nvcc, cuBLAS and NCCL and says what it
# found, builds test_cuda and gpu_bench with scripts/gpu-check/CMakeLists.txt against the
# carry from scripts/gpu-carry.sh, runs the tests and the benchmark, and prints a short
# table. It also runs test_runtime_cuda (the actor runtime on the GPU), which travels
# prebuilt in the carry. Without a GPU it still builds and runs both (every case
# reports itself skipped) and says "no GPU" instead of benchmarking.
#
#   scripts/gpu-carry.sh                 here, where the Debian packages are (once per change
#                                        of config.proto or the packages)
#   scripts/gpu-check.sh [bench args]    there; carry build-gpucarry/ with the working tree
#
# Extra arguments go to gpu_bench (default: GPT-2 124M, 16 x 4 sequences of 1024).
# Work folder: build-gpucheck/ (or $TROUPE_GPU_WORK). Logs, the benchmark's JSON and the
# summary go to $OUT when it is set (the device tool's output folder), else to
# build-gpucheck/logs. Budget: about 1-2 minutes of build on 16 cores, under a minute of
# tests and benchmark on one H200.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
work="${TROUPE_GPU_WORK:-$root/build-gpucheck}"
logs="${OUT:-$work/logs}"
mkdir -p "$work" "$logs"
t_start=$(date +%s)
rows="$work/rows.md"
: > "$rows"
say() { echo "gpu-check: $*"; }
row() { printf '| %s | %s |\n' "$1" "$2" >> "$rows"; }
# The table, also kept as $logs/summary.md.
table() { { echo "| what | result |"; echo "| --- | --- |"; cat "$rows"; } | tee "$logs/summary.md"; }
elapsed() { echo $(( $(date +%s) - t_start )); }
status=0

# ---- 1. what is on this machine ------------------------------------------------------
nvcc="$(command -v nvcc || true)"
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc" ]; then
  say "no nvcc on PATH or in /usr/local/cuda/bin: cannot build the CUDA parts"
  exit 1
fi
cuda_root="$(dirname "$(dirname "$(readlink -f "$nvcc")")")"
nvcc_version="$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p')"
say "nvcc $nvcc_version ($nvcc, toolkit $cuda_root)"
for tool in cmake ninja; do
  command -v "$tool" >/dev/null || { say "no $tool on PATH"; exit 1; }
done
say "$(cmake --version | head -1), ninja $(ninja --version)"

py_nvidia="$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null || true)"
lib_dirs=("$cuda_root/lib64" "$cuda_root/lib" "$cuda_root/targets/x86_64-linux/lib" /usr/lib/x86_64-linux-gnu /usr/lib64)
inc_dirs=("$cuda_root/include" "$cuda_root/targets/x86_64-linux/include" /usr/include)
find_file_in() {  # name dirs... -> first match, searched 4 levels deep
  local name="$1"; shift
  for d in "$@"; do
    [ -d "$d" ] || continue
    local f
    f="$(find -L "$d" -maxdepth 4 -name "$name" 2>/dev/null | sort | head -1)"
    [ -n "$f" ] && { echo "$f"; return 0; }
  done
  return 1
}
cublas="$(find_file_in 'libcublas.so*' "${lib_dirs[@]}" || true)"
if [ -z "$cublas" ]; then
  say "cuBLAS: not found in ${lib_dirs[*]}"
  exit 1
fi
say "cuBLAS: $cublas"
nccl_lib="$(find_file_in 'libnccl.so*' "${lib_dirs[@]}" ${py_nvidia:+"$py_nvidia"} || true)"
nccl_inc="$(find_file_in nccl.h "${inc_dirs[@]}" ${py_nvidia:+"$py_nvidia"} || true)"
nccl_args=()
if [ -n "$nccl_lib" ] && [ -n "$nccl_inc" ]; then
  nccl_version="$(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' "$nccl_inc" | paste -sd.)"
  say "NCCL $nccl_version: $nccl_lib, $nccl_inc"
  nccl_args=(-DNCCL_LIBRARY="$nccl_lib" -DNCCL_INCLUDE_DIR="$(dirname "$nccl_inc")")
  row "NCCL" "$nccl_version ($nccl_lib)"
else
  say "NCCL: not found (library: ${nccl_lib:-none}, nccl.h: ${nccl_inc:-none}); the NCCL tests are left out"
  nccl_args=(-DNCCL_LIBRARY=NCCL_LIBRARY-NOTFOUND -DNCCL_INCLUDE_DIR=NCCL_INCLUDE_DIR-NOTFOUND)
  row "NCCL" "not found: NCCL tests left out"
fi
row "nvcc / cuBLAS" "$nvcc_version / $(basename "$cublas")"

gpu="none"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
  say "GPU: $gpu ($(nvidia-smi -L | wc -l) visible)"
else
  say "no GPU (nvidia-smi finds none): building and running the skip path only"
fi
row "GPU" "$gpu"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "host: $(uname -a)"; echo "gpu: $gpu"
  echo "nvcc: $nvcc_version ($nvcc)"; echo "cublas: $cublas"; echo "nccl: ${nccl_lib:-none} ${nccl_inc:-}"
  echo "g++: $(g++ --version 2>/dev/null | head -1)"; echo "cmake: $(cmake --version | head -1)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  command -v nvidia-smi >/dev/null && nvidia-smi 2>&1
} > "$logs/env.txt"

# ---- 2. the carry -------------------------------------------------------------------
archive="$root/build-gpucarry/gpu-deps.tar.gz"
if [ ! -f "$archive" ]; then
  say "$archive is missing: run scripts/gpu-carry.sh on a machine with troupe's Debian packages and carry build-gpucarry/"
  exit 1
fi
carry="$work/carry"
if [ ! -f "$carry/.stamp" ] || [ "$archive" -nt "$carry/.stamp" ]; then
  rm -rf "$carry" && mkdir -p "$carry" && tar -xzf "$archive" -C "$carry" && touch "$carry/.stamp" \
    || { say "cannot unpack $archive"; exit 1; }
fi

# ---- 3. build -----------------------------------------------------------------------
t0=$(date +%s)
cmake -S scripts/gpu-check -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTROUPE_CARRY="$carry" \
  -DCMAKE_CUDA_COMPILER="$nvcc" "${nccl_args[@]}" > "$logs/build.log" 2>&1 \
  && cmake --build "$work/build" -j "$(nproc)" >> "$logs/build.log" 2>&1
build_rc=$?
build_s=$(( $(date +%s) - t0 ))
if [ $build_rc -ne 0 ]; then
  say "build FAILED after ${build_s} s; the end of $logs/build.log:"
  tail -40 "$logs/build.log"
  row "build" "FAILED (${build_s} s)"
  table
  exit 1
fi
say "built test_cuda and gpu_bench in ${build_s} s"
row "build" "ok, ${build_s} s on $(nproc) cores"
if command -v cuobjdump >/dev/null; then
  archs="$(cuobjdump --list-elf "$work/build/test_cuda" 2>/dev/null | sed -n 's/.*\.\(sm_[0-9a-z]*\)\..*/\1/p' | sort -u | paste -sd,)"
  ptx="$(cuobjdump --list-ptx "$work/build/test_cuda" 2>/dev/null | sed -n 's/.*\.\(sm_[0-9a-z]*\)\..*/\1/p' | sort -u | paste -sd,)"
  row "kernel images" "SASS ${archs:-none}; PTX ${ptx:-none}"
fi

# ---- 4. tests -----------------------------------------------------------------------
# run_suite NAME DIR [VAR=VALUE...]: runs DIR/NAME (a doctest binary) with the given
# environment, logs to $logs/NAME.log, prints its failures and adds a table row.
run_suite() {
  local name="$1" dir="$2"; shift 2
  local log="$logs/$name.log" t0 rc secs cases asserts skipped
  t0=$(date +%s)
  (cd "$dir" && env "$@" timeout 300 "./$name") > "$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  cases="$(grep -o 'test cases: .*' "$log" | tail -1 | sed 's/ *| */, /g; s/, *$//')"
  asserts="$(grep -o 'assertions: .*' "$log" | tail -1 | sed 's/ *| */, /g; s/, *$//')"
  skipped="$(grep -c 'SKIPPED:' "$log")"
  if [ $rc -eq 0 ]; then
    say "$name passed in ${secs} s ($cases; $skipped cases reported SKIPPED)"
    row "$name" "passed, ${secs} s; ${cases}; ${asserts}; ${skipped} skipped"
  else
    status=1
    say "$name FAILED (exit $rc) in ${secs} s; failures:"
    grep -B2 -A6 'ERROR\|FATAL\|timed out\|Aborted\|not found' "$log" | head -80
    tail -5 "$log"
    row "$name" "FAILED (exit $rc), ${secs} s; ${cases}; ${asserts}"
  fi
  grep 'MESSAGE:' "$log" | grep -v SKIPPED | sed 's/^.*MESSAGE: /  /' | head -12
}

run_suite test_cuda "$work/build" NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}" NCCL_DEBUG="${NCCL_DEBUG:-WARN}"

# The actor runtime on the GPU, prebuilt by scripts/gpu-carry.sh with its libraries.
rt_archive="$root/build-gpucarry/runtime-test.tar.xz"
if [ -f "$rt_archive" ]; then
  rt="$work/runtime"
  rm -rf "$rt" && mkdir -p "$rt" && tar -xJf "$rt_archive" -C "$rt"
  cudart="$(find_file_in 'libcudart.so.*' "${lib_dirs[@]}" || true)"
  # It links NCCL too (its NCCL-groups case; the library comes from the toolkit found above).
  rt_path="$rt/lib:$(dirname "$cublas")${cudart:+:$(dirname "$cudart")}${nccl_lib:+:$(dirname "$nccl_lib")}"
  run_suite test_runtime_cuda "$rt" TROUPE_DATA_DIR="$rt/data" NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}" \
    LD_LIBRARY_PATH="$rt_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  row "test_runtime_cuda" "not run: no build-gpucarry/runtime-test.tar.xz (scripts/gpu-carry.sh makes it where nvcc is)"
fi

# ---- 5. benchmark -------------------------------------------------------------------
if [ "$gpu" != "none" ]; then
  t0=$(date +%s)
  (cd "$work/build" && timeout 300 ./gpu_bench --json "$logs/gpu_bench.json" "$@") > "$logs/gpu_bench.log" 2>&1
  bench_rc=$?
  bench_s=$(( $(date +%s) - t0 ))
  if [ $bench_rc -eq 0 ]; then
    mfu="$(sed -n 's/^| MFU | \(.*\) |$/\1/p' "$logs/gpu_bench.log")"
    tps="$(sed -n 's/^| tokens\/s | \(.*\) |$/\1/p' "$logs/gpu_bench.log")"
    peak="$(sed -n 's/^| bf16 GEMM peak (measured) | \(.*\) |$/\1/p' "$logs/gpu_bench.log")"
    row "gpu_bench (${bench_s} s)" "${tps} tokens/s, MFU ${mfu} of ${peak}"
  else
    status=1
    row "gpu_bench" "FAILED (exit $bench_rc), ${bench_s} s"
    tail -20 "$logs/gpu_bench.log"
  fi
else
  row "gpu_bench" "not run: no GPU"
fi
row "total" "$(elapsed) s"

echo
echo "## gpu-check"
table
if [ -f "$logs/gpu_bench.log" ]; then
  echo
  sed -n '/^| quantity/,$p' "$logs/gpu_bench.log"
fi
exit $status
