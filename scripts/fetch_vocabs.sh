#!/usr/bin/env bash
# Fetches the test data that comes from the llama-cpp-python sdist on PyPI
# (the copy bench/peers/ downloaded, when there is one), not committed:
#  - tests/data/vocab/: llama.cpp's ggml-vocab-*.gguf files with their .inp
#    (texts) and .out (expected token ids), for the vocabulary tests;
#  - tests/data/templates/: the real chat templates of models/templates/*.jinja,
#    for tests/chat_templates/check_templates.py.
# Idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
out="$root/tests/data/vocab"
templates="$root/tests/data/templates"
[ -f "$out/.complete-$VERSION" ] && [ -f "$templates/.complete-$VERSION" ] && exit 0
tarball="$root/bench/peers/.work/llama_cpp_python-$VERSION.tar.gz"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -f "$tarball" ]; then
  echo "fetch_vocabs: downloading the llama-cpp-python $VERSION sdist (PyPI)" >&2
  python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$tmp"
  tarball="$tmp/llama_cpp_python-$VERSION.tar.gz"
fi
mkdir -p "$out" "$templates"
tar xzf "$tarball" -C "$tmp" --wildcards "llama_cpp_python-$VERSION/vendor/llama.cpp/models/ggml-vocab-*" \
  "llama_cpp_python-$VERSION/vendor/llama.cpp/models/templates/*.jinja"
cp "$tmp/llama_cpp_python-$VERSION/vendor/llama.cpp/models/"ggml-vocab-* "$out/"
cp "$tmp/llama_cpp_python-$VERSION/vendor/llama.cpp/models/templates/"*.jinja "$templates/"
touch "$out/.complete-$VERSION" "$templates/.complete-$VERSION"
