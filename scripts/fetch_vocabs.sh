#!/usr/bin/env bash
# Fetches the test data that comes from the llama-cpp-python sdist on PyPI
# (the copy bench/peers/ downloaded, when there is one), not committed:
#  - tests/data/vocab/: llama.cpp's ggml-vocab-*.gguf files with their .inp
#    (texts) and .out (expected token ids), for the vocabulary tests;
#  - tests/data/templates/: the real chat templates of models/templates/*.jinja,
#    for tests/chat_templates/check_templates.py;
#  - tests/data/vocab/ggml-vocab-o200k.gguf: gpt-oss's tokenizer, which the
#    sdist lacks, from the o200k_base ranks in PyPI's litellm wheel (its
#    tiktoken cache) through scripts/make_o200k_vocab.py, with test ids from
#    tiktoken;
#  - tests/data/vocab/ggml-vocab-tekken.gguf: Mistral's Tekken tokenizer
#    (Mistral Nemo, Mistral Small 3.x), from tekken_240718.json in PyPI's
#    mistral-common wheel through scripts/make_tekken_vocab.py, with test ids
#    from tiktoken over its ranks (as mistral_common's Tekkenizer encodes).
# Idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
out="$root/tests/data/vocab"
templates="$root/tests/data/templates"
LITELLM_VERSION=${LITELLM_VERSION:-1.110.2}
o200k_done="$out/.complete-o200k-$LITELLM_VERSION"
MISTRAL_COMMON_VERSION=${MISTRAL_COMMON_VERSION:-1.13.1}
tekken_done="$out/.complete-tekken-$MISTRAL_COMMON_VERSION"
[ -f "$out/.complete-$VERSION" ] && [ -f "$templates/.complete-$VERSION" ] && [ -f "$o200k_done" ] &&
  [ -f "$tekken_done" ] && exit 0
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

if [ ! -f "$o200k_done" ]; then
  echo "fetch_vocabs: o200k from the litellm $LITELLM_VERSION wheel (PyPI)" >&2
  python3 -m pip download --quiet --no-deps --only-binary :all: "litellm==$LITELLM_VERSION" -d "$tmp/litellm"
  ranks=litellm/litellm_core_utils/tokenizers/fb374d419588a4632f3f557e76b4b70aebbca790
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' \
    "$(ls "$tmp"/litellm/litellm-*.whl | head -1)" "$ranks" "$tmp/litellm"
  python3 "$root/scripts/make_o200k_vocab.py" "$tmp/litellm/$ranks" "$out" \
    --template "$templates/openai-gpt-oss-120b.jinja" --inp "$out/ggml-vocab-llama-bpe.gguf.inp" >&2
  touch "$o200k_done"
fi

if [ ! -f "$tekken_done" ]; then
  echo "fetch_vocabs: tekken from the mistral-common $MISTRAL_COMMON_VERSION wheel (PyPI)" >&2
  python3 -m pip download --quiet --no-deps --only-binary :all: "mistral-common==$MISTRAL_COMMON_VERSION" -d "$tmp/mc"
  json=mistral_common/data/tekken_240718.json
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' \
    "$(ls "$tmp"/mc/mistral_common-*.whl | head -1)" "$json" "$tmp/mc"
  python3 "$root/scripts/make_tekken_vocab.py" "$tmp/mc/$json" "$out" \
    --template "$templates/mistralai-Mistral-Nemo-Instruct-2407.jinja" --inp "$out/ggml-vocab-llama-bpe.gguf.inp" >&2
  touch "$tekken_done"
fi
