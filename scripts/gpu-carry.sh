#!/usr/bin/env bash
# Stages, on a machine with troupe's Debian packages, what the GPU check build needs and
# a GPU machine lacks (it has the CUDA toolkit, CMake and ninja only), as one archive:
#   build-gpucarry/gpu-deps.tar.gz   (build-* is git-ignored; carry the folder with the run)
# holding doctest.h, the protobuf headers and static library, protoc's C++ for
# messages/config.proto, cblas.h, and cblas_sgemm with the OpenBLAS kernels it pulls in,
# linked into one relocatable object (the whole libopenblas.a is 58 MB; this is 27 MB,
# about 6 MB compressed). scripts/gpu-check.sh unpacks it. Where the CUDA toolkit is
# here too, it also writes build-gpucarry/runtime-test.tar.xz: test_runtime_cuda
# prebuilt with its shared libraries and the default corpus (below). Versions go to
# build-gpucarry/MANIFEST.
set -euo pipefail
cd "$(dirname "$0")/.."

out=build-gpucarry
stage="$(mktemp -d)"
rt_stage="$(mktemp -d)"
trap 'rm -rf "$stage" "$rt_stage"' EXIT

need() { [ -e "$1" ] || { echo "gpu-carry: $1 is missing (run scripts/setup.sh first)" >&2; exit 1; }; }
blas_dir=/usr/include/x86_64-linux-gnu/openblas-pthread
for f in /usr/include/doctest/doctest.h /usr/include/google/protobuf/message.h /usr/lib/x86_64-linux-gnu/libprotobuf.a \
         /usr/lib/x86_64-linux-gnu/libopenblas.a "$blas_dir/cblas.h" "$blas_dir/openblas_config.h"; do
  need "$f"
done
command -v protoc >/dev/null || { echo "gpu-carry: protoc is missing (run scripts/setup.sh first)" >&2; exit 1; }

mkdir -p "$stage/include/doctest" "$stage/include/google" "$stage/include/messages" "$stage/lib"
cp /usr/include/doctest/doctest.h "$stage/include/doctest/"
cp -r /usr/include/google/protobuf "$stage/include/google/"
cp "$blas_dir/cblas.h" "$blas_dir/openblas_config.h" "$stage/include/"
protoc --cpp_out="$stage/include/messages" -I messages messages/config.proto
cp /usr/lib/x86_64-linux-gnu/libprotobuf.a "$stage/lib/"
ld -r -o "$stage/lib/openblas_sgemm.o" -u cblas_sgemm -u openblas_set_num_threads \
  /usr/lib/x86_64-linux-gnu/libopenblas.a
strip --strip-debug "$stage/lib/openblas_sgemm.o"

# The actor runtime's GPU suite, prebuilt: test_runtime_cuda links CAF, spdlog,
# OpenBLAS, ICU, OpenSSL and more that the GPU machine lacks, so it travels as a binary
# with every shared library it loads except glibc's and CUDA's (the GPU machine has
# those; the binary needs glibc >= 2.36), plus the default corpus prepared here (the GPU
# machine has no fortunes package). About 19 MB as build-gpucarry/runtime-test.tar.xz.
# Needs the CUDA toolkit here (TROUPE_CUDA finds it); skipped with a note otherwise.
runtime_made=no
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  [ -f build/CMakeCache.txt ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build build -j "$(nproc)" --target test_runtime_cuda supervisor > "$rt_stage/runtime-build.log" 2>&1 \
    || { tail -30 "$rt_stage/runtime-build.log" >&2; echo "gpu-carry: building test_runtime_cuda failed" >&2; exit 1; }
  rt="$rt_stage/runtime"
  mkdir -p "$rt/lib" "$rt/data"
  # The shared libraries BINARY loads (with the environment's LD_LIBRARY_PATH) that
  # the GPU machine lacks: all but glibc's and CUDA's.
  bundled_libs() {
    ldd "$1" | awk '$3 ~ /^\// {print $3}' \
      | grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux-x86-64|libcudart|libcublas|libcublasLt|libnccl|libcuda)\.so' \
      || true
  }
  cp build/test/test_runtime_cuda "$rt/"
  bundled_libs build/test/test_runtime_cuda | while read -r lib; do cp -L "$lib" "$rt/lib/"; done
  # The default corpus, prepared by a one-layer inspect-update into the bundle's data dir.
  TROUPE_DATA_DIR="$rt/data" build/apps/supervisor inspect-update --set model.layers=1 --set model.width=32 \
    --set model.heads=1 --set batch.global_batch_size=2 --set batch.micro_batch_size=1 --set parallel.data=1 \
    --set parallel.pipeline=1 --out "$rt_stage/inspect-update" > "$rt_stage/corpus.log" 2>&1 \
    || { cat "$rt_stage/corpus.log" >&2; echo "gpu-carry: preparing the default corpus failed" >&2; exit 1; }
  rm -f "$rt"/data/*.sidx
  # Every library the binary loads must now come from the bundle, glibc's and CUDA's aside.
  missing="$(LD_LIBRARY_PATH="$rt/lib" bundled_libs "$rt/test_runtime_cuda" | grep -v "^$rt/lib/" || true)"
  [ -z "$missing" ] || { echo "gpu-carry: the runtime bundle misses $missing" >&2; exit 1; }
  mkdir -p "$out"
  tar -cJf "$out/runtime-test.tar.xz.tmp" -C "$rt" .
  sync "$out/runtime-test.tar.xz.tmp"
  mv "$out/runtime-test.tar.xz.tmp" "$out/runtime-test.tar.xz"
  runtime_made=yes
else
  echo "gpu-carry: no nvcc here: the prebuilt runtime suite (runtime-test.tar.xz) is left out" >&2
fi

mkdir -p "$out"
tar -czf "$out/gpu-deps.tar.gz.tmp" -C "$stage" .
sync "$out/gpu-deps.tar.gz.tmp"
mv "$out/gpu-deps.tar.gz.tmp" "$out/gpu-deps.tar.gz"
{
  echo "made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "protoc: $(protoc --version)"
  dpkg-query -W -f='${Package} ${Version}\n' doctest-dev libprotobuf-dev libopenblas0-pthread 2>/dev/null || true
  sha256sum "$out/gpu-deps.tar.gz"
  [ "$runtime_made" = yes ] && sha256sum "$out/runtime-test.tar.xz"
  true
} > "$out/MANIFEST.tmp"
mv "$out/MANIFEST.tmp" "$out/MANIFEST"
echo "gpu-carry: $out/gpu-deps.tar.gz ($(du -h "$out/gpu-deps.tar.gz" | cut -f1))"
[ "$runtime_made" = yes ] && echo "gpu-carry: $out/runtime-test.tar.xz ($(du -h "$out/runtime-test.tar.xz" | cut -f1))"
echo "gpu-carry: carry $out with scripts/gpu-check.sh"
