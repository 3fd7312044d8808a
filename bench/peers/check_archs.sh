#!/usr/bin/env bash
# The architectures without real weights here (Llama 3, Qwen 2, Qwen 3, Qwen3-MoE, gpt-oss,
# Phi-3/Phi-4 with and without LongRoPE, Mistral Small, Ministral 3, SmolLM3, Granite, Gemma 2, OLMo 2 and 3, GLM-4),
# checked against llama.cpp: for each, make_synthetic.py writes a random-weight
# GGUF with the sdist's real vocabulary (F16), llama-quantize makes a copy in
# each of TYPES (default Q4_K_M), and perplexity.sh measures both engines' KL divergence from
# chunkserve's float reference on the papers' text (a wrong RoPE pairing, bias
# or norm in either engine shows as a KL of tenths, not millionths); then
# `chunkserve generate` and `serve` run on each file. Needs build_llama_cpp.sh
# and scripts/fetch_vocabs.sh to have run.
#   CHUNKS=8 [TYPES="Q4_K_M Q2_K"] bench/peers/check_archs.sh [llama3 qwen2 qwen3 qwen3moe gpt-oss phi3 phi3-short phi35 phi4 mistral-small ministral3 smollm3 granite gemma2 olmo2 olmo3 glm4]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="$here/.work/llama.cpp/build/bin"
CHUNKS=${CHUNKS:-8}
TYPES=${TYPES:-Q4_K_M}
work=${WORK:-$(mktemp -d)}
archs=("$@")
[ ${#archs[@]} -gt 0 ] || archs=(llama3 qwen2 qwen3 qwen3moe gpt-oss phi3 phi3-short phi35 phi4 mistral-small ministral3 smollm3 granite gemma2 olmo2 olmo3 glm4)
"$root/scripts/fetch_vocabs.sh"
"$root/scripts/fetch_gemma.sh" > /dev/null  # gemma2's vocabulary
echo "| file | PPL ratio (chunkserve / llama.cpp) | mean KL, chunkserve | mean KL, llama.cpp | top-1 as the reference, chunkserve | llama.cpp | serve |"
echo "|---|---|---|---|---|---|---|"
for a in "${archs[@]}"; do
  f16="$work/$a-F16.gguf"
  [ -f "$f16" ] || python3 "$here/make_synthetic.py" "$a" "$f16" >&2
  files=("$f16")
  for t in $TYPES; do
    q="$work/$a-$t.gguf"
    [ -f "$q" ] || LD_LIBRARY_PATH="$bin" "$bin/llama-quantize" "$f16" "$q" "$t" 2 > "$work/quantize.log" 2>&1
    files+=("$q")
  done
  for m in "${files[@]}"; do
    t=$(MODEL="$m" CHUNKS="$CHUNKS" "$here/perplexity.sh" 2>/dev/null)
    row() { grep -F "$1" <<<"$t" | head -1; }
    ratio=$(row "| PPL |" | awk -F'|' '{print $5}')
    kl=$(row "mean KL" | awk -F'|' '{print $3 "|" $4}')
    top=$(row "top-1" | awk -F'|' '{print $3 "|" $4}')
    served=$("$here/serve_check.sh" "$m")
    echo "| $(basename "$m") |$ratio|$kl|$top| $served |"
  done
done
