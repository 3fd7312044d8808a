#!/usr/bin/env bash
# Configures (once) and builds. Usage: scripts/build.sh [BUILD_DIR] [cmake args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build}
shift || true
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
ninja -C "$dir" --quiet 2>/dev/null || ninja -C "$dir" | grep -v '^\[' || true
test -x "$dir/chunkserve"
