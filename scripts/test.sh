#!/usr/bin/env bash
# Sets up, builds (warnings are errors) and runs every test through ctest.
# Usage: scripts/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTESSERA_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
# mpirun refuses to run as root unless told; CI runs as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One test per core at a time: many tests spend much of their time waiting (process start-up,
# mpirun, watchdog and signal timeouts), so two at once on two cores measured 18-39 % faster.
cd build && ctest --output-on-failure --timeout 600 -j"$(nproc)" "$@"
