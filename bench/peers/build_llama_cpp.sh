#!/usr/bin/env bash
# Builds llama.cpp, the peer we measure against, from the llama-cpp-python sdist
# on PyPI (the only registry that carries its source here). Not run by CI: it
# takes ~10 minutes on 2 cores. Output: bench/peers/.work/llama.cpp/build/bin
# with libllama.so, llama-bench, llama-batched-bench, llama-server, llama-quantize,
# llama-lookup (prompt-lookup speculation, bench/speculation.py) and
# llama-tokenize, plus the llama_cpp Python bindings (pure Python over that
# library) in .work/llama_cpp_python.
# CPUs that report AMX fault on its instructions inside these VMs (a native
# build dies with SIGILL in ggml's AMX kernels), so there the build names the
# AVX-512 options itself and leaves AMX out.
set -euo pipefail
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
here=$(cd "$(dirname "$0")" && pwd)
work="$here/.work"
mkdir -p "$work"
cd "$work"
if [ ! -f "llama_cpp_python-$VERSION.tar.gz" ]; then
  pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d . >/dev/null
fi
if [ ! -d "llama_cpp_python-$VERSION" ]; then
  tar xzf "llama_cpp_python-$VERSION.tar.gz"
fi
# The sdist keeps llama.cpp's submodule gitlink, which points at a .git/modules
# folder it does not ship: llama.cpp's build-info step then depends on a missing
# git index and ninja re-runs CMake forever ("build.ninja still dirty").
rm -f "llama_cpp_python-$VERSION/vendor/llama.cpp/.git"
ln -sfn "llama_cpp_python-$VERSION/vendor/llama.cpp" llama.cpp
ln -sfn "llama_cpp_python-$VERSION" llama_cpp_python
isa=(-DGGML_NATIVE=ON)
if grep -qw amx_tile /proc/cpuinfo; then
  isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON
       -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF
       -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
  echo "build_llama_cpp: this CPU reports AMX; building with AVX-512 and AMX off" >&2
fi
cmake -S llama.cpp -B llama.cpp/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF "${isa[@]}" \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >/dev/null
ninja -C llama.cpp/build -j"$(nproc)" llama llama-bench llama-tokenize llama-batched-bench llama-server llama-perplexity \
  llama-quantize llama-lookup
pip install -q numpy diskcache jinja2 typing_extensions
echo "built: $work/llama.cpp/build/bin"
