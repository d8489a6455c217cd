#!/usr/bin/env bash
# Stages, on a machine with troupe's Debian packages, what the GPU check build needs and
# a GPU machine lacks (it has the CUDA toolkit, CMake and ninja only), as one archive:
#   build-gpucarry/gpu-deps.tar.gz   (build-* is git-ignored; carry the folder with the run)
# holding doctest.h, the protobuf headers and static library, protoc's C++ for
# messages/config.proto, cblas.h, and cblas_sgemm with the OpenBLAS kernels it pulls in,
# linked into one relocatable object (the whole libopenblas.a is 58 MB; this is 27 MB,
# about 6 MB compressed). scripts/gpu-check.sh unpacks it. Versions go to
# build-gpucarry/MANIFEST.
set -euo pipefail
cd "$(dirname "$0")/.."

out=build-gpucarry
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

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

mkdir -p "$out"
tar -czf "$out/gpu-deps.tar.gz.tmp" -C "$stage" .
sync "$out/gpu-deps.tar.gz.tmp"
mv "$out/gpu-deps.tar.gz.tmp" "$out/gpu-deps.tar.gz"
{
  echo "made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "protoc: $(protoc --version)"
  dpkg-query -W -f='${Package} ${Version}\n' doctest-dev libprotobuf-dev libopenblas0-pthread 2>/dev/null || true
  sha256sum "$out/gpu-deps.tar.gz"
} > "$out/MANIFEST.tmp"
mv "$out/MANIFEST.tmp" "$out/MANIFEST"
echo "gpu-carry: $out/gpu-deps.tar.gz ($(du -h "$out/gpu-deps.tar.gz" | cut -f1)); carry $out with scripts/gpu-check.sh"
