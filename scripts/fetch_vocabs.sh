#!/usr/bin/env bash
# Fetches the tokenizer test data the vocabulary tests read: llama.cpp's
# ggml-vocab-*.gguf files with their .inp (texts) and .out (expected token ids),
# from the llama-cpp-python sdist on PyPI (the copy bench/peers/ unpacked, when
# there is one). Into tests/data/vocab/ (not committed). Idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
out="$root/tests/data/vocab"
[ -f "$out/.complete-$VERSION" ] && exit 0
tarball="$root/bench/peers/.work/llama_cpp_python-$VERSION.tar.gz"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -f "$tarball" ]; then
  echo "fetch_vocabs: downloading the llama-cpp-python $VERSION sdist (PyPI)" >&2
  python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$tmp"
  tarball="$tmp/llama_cpp_python-$VERSION.tar.gz"
fi
mkdir -p "$out"
tar xzf "$tarball" -C "$tmp" --wildcards "llama_cpp_python-$VERSION/vendor/llama.cpp/models/ggml-vocab-*"
cp "$tmp/llama_cpp_python-$VERSION/vendor/llama.cpp/models/"ggml-vocab-* "$out/"
touch "$out/.complete-$VERSION"
