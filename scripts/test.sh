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
cd build && ctest --output-on-failure --timeout 600 "$@"
