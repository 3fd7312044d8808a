#!/usr/bin/env bash
# A random-weight Q4_K_M file made on the device machine, which has no network
# and none of our set-up (../shared/device/README.md): make_synthetic.py's
# PRESET as F16 (PyPI's gguf wheel from .dev/whl, the vocabulary from
# .dev/vocab, .xz or not), then llama-quantize from .dev/llama. Kept across
# calls in one machine's life; its log goes to LOG. KEEP_F16=1 keeps the F16
# file too, as OUT.gguf.f16.
#   bench/gpu/make_model.sh PRESET OUT.gguf LOG     e.g. llama3-1b /tmp/models/llama3-1b-Q4_K_M.gguf
set -uo pipefail
preset=${1:?usage: make_model.sh PRESET OUT.gguf LOG} file=${2:?} log=${3:?}
root=$(cd "$(dirname "$0")/../.." && pwd)
dev=$root/.dev
[ -f "$file" ] && exit 0
mkdir -p "$(dirname "$file")" "$root/tests/data/vocab"
for f in "$dev"/vocab/*; do
  v=$root/tests/data/vocab/$(basename "$f" .xz)
  [ -f "$v" ] || case $f in *.xz) xz -dc "$f" > "$v" ;; *) cp "$f" "$v" ;; esac
done
[ -d /tmp/site/gguf ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site "$dev"/whl/*.whl >> "$log" 2>&1
PYTHONPATH=/tmp/site python3 "$root/bench/peers/make_synthetic.py" "$preset" "$file.f16" >> "$log" 2>&1 &&
  LD_LIBRARY_PATH=$dev/llama "$dev/llama/llama-quantize" "$file.f16" "$file" Q4_K_M 16 >> "$log" 2>&1
status=$?
[ "${KEEP_F16:-0}" = 1 ] && [ $status = 0 ] || rm -f "$file.f16"
[ $status = 0 ] || { tail -5 "$log"; rm -f "$file"; }
exit $status
