#!/usr/bin/env bash
# Installs the CUDA toolkit chunkserve's GPU code is built with, from PyPI,
# pinned, into .deps/cuda (about 300 MB; nothing outside the checkout). CMake
# then builds the CUDA code with it (CMakeLists.txt looks there first). Only
# for building: running on a GPU needs NVIDIA's driver for CUDA 13.0 (R580 or
# newer), which no package here installs. Idempotent.
#   scripts/setup_cuda.sh && rm -rf build && scripts/build.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.deps/cuda"
# nvidia-nvvm is pinned too: nvidia-cuda-nvcc requires it unpinned, and a newer
# nvvm writes PTX that this ptxas refuses ("Unsupported .version").
WHEELS=("cuda-toolkit[nvcc,cudart,crt,cccl]==13.0.2" "nvidia-nvvm==13.0.88")
if [ -x "$dest/nvidia/cu13/bin/nvcc" ] && "$dest/nvidia/cu13/bin/nvcc" --version | grep -q "release 13.0"; then
  exit 0
fi
echo "setup_cuda: installing ${WHEELS[*]} into .deps/cuda (PyPI)" >&2
rm -rf "$dest"
python3 -m pip install --quiet --target "$dest" "${WHEELS[@]}"
"$dest/nvidia/cu13/bin/nvcc" --version | tail -1
