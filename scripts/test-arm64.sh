#!/usr/bin/env bash
# Cross-compiles the kernel library and its unit tests for arm64 (TESSERA_KERNELS_ONLY: no MPI,
# no oneDNN; fp32 GEMMs through the reference loops, 16-bit ones on the blocked GEMM) and runs
# them under qemu-aarch64 with the target in turn capped to each one the arm64 build has.
# Installs the cross compiler, qemu and the arm64 C/C++/OpenMP runtimes (Debian multiarch) on
# first use.
# Usage: scripts/test-arm64.sh [gtest filter]   (default: every kernel test)
set -euo pipefail
cd "$(dirname "$0")/.."
filter="${1:-*}"

packages=(g++-aarch64-linux-gnu qemu-user libgtest-dev libc6:arm64 libstdc++6:arm64 libgomp1:arm64)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "test-arm64: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  dpkg --print-foreign-architectures | grep -qx arm64 || "${sudo_cmd[@]}" dpkg --add-architecture arm64
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

start=$(date +%s)
cmake -S . -B build-arm64 -DCMAKE_BUILD_TYPE=Release -DTESSERA_WERROR=ON -DTESSERA_KERNELS_ONLY=ON \
  -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
  -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ >/dev/null
cmake --build build-arm64 -j"$(nproc)" --target tessera_kernel_tests
built=$(date +%s)
echo "test-arm64: cross-built in $((built - start)) s"
file build-arm64/bin/tessera_kernel_tests | sed 's/,.*//'
# qemu-user runs the arm64 binary with the arm64 loader and libraries installed by multiarch
# (no -L: mixing the cross toolchain's loader with the arm64 libc hangs threaded programs).
OMP_NUM_THREADS=2 TESSERA_CPU_TARGET=neon qemu-aarch64 build-arm64/bin/tessera_kernel_tests \
  --gtest_filter="$filter" --gtest_brief=1
echo "test-arm64: ran under qemu-aarch64 in $(($(date +%s) - built)) s"
