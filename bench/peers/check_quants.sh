#!/usr/bin/env bash
# The default SmolLM2 file requantized by llama.cpp's llama-quantize into each
# of TYPES, and each copy checked against llama.cpp as the default file is:
# make_conformance.py records llama.cpp's token ids, greedy 32-token
# continuations and first-step logits on the copy, and the Conformance tests
# (model_tests, pointed at the copy by CS_CONFORMANCE_MODEL/_DATA) require
# the tokens identical and any divergence of a continuation to come at a
# near-tie, logits within the noise floor; then `generate` and `serve` run on
# it. Perplexity and KL: perplexity.sh. Needs build_llama_cpp.sh to have run.
#   [TYPES="Q4_K_M Q5_K_M Q6_K Q5_0"] bench/peers/check_quants.sh [OUT_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="$here/.work/llama.cpp/build/bin"
src="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
TYPES=${TYPES:-"Q4_K_M Q5_K_M Q6_K Q5_0"}
out=${1:-$here/.work/quants}
mkdir -p "$out"
echo "| file | tokenizer | continuations (identical / parted at a near-tie) | max top-5 logit difference | generate | serve |"
echo "|---|---|---|---|---|---|"
for t in $TYPES; do
  m="$out/smollm2-$t.gguf"
  [ -f "$m" ] || LD_LIBRARY_PATH="$bin" "$bin/llama-quantize" --allow-requantize "$src" "$m" "$t" 2 \
    > "$out/quantize-$t.log" 2>&1
  python3 "$here/make_conformance.py" "$m" "$out/conformance-$t.json" > /dev/null
  log="$out/conformance-$t.log"
  CS_CONFORMANCE_MODEL="$m" CS_CONFORMANCE_DATA="$out/conformance-$t.json" "$root/build/tests/model_tests" \
    --gtest_filter='Conformance.TokenizerMatchesLlamaCpp:Conformance.GreedyContinuationsMatchLlamaCpp:Conformance.FirstLogitsCloseToLlamaCpp' \
    > "$log" 2>&1 && pass=1 || pass=0
  tokenizer=$(grep -q "OK \] Conformance.TokenizerMatchesLlamaCpp" "$log" && echo exact || echo FAIL)
  cont=$(sed -n 's/.*\[conformance\] \([0-9]*\) of \([0-9]*\) continuations identical, \([0-9]*\) diverge.*/\1 \/ \3 of \2/p' "$log")
  grep -q "OK \] Conformance.GreedyContinuationsMatchLlamaCpp" "$log" || cont="$cont FAIL"
  logit=$(sed -n 's/.*top-5 of [0-9]* prompts: \([0-9.]*\).*/\1/p' "$log")
  grep -q "OK \] Conformance.FirstLogitsCloseToLlamaCpp" "$log" || logit="$logit FAIL"
  gen=$("$root/build/chunkserve" generate -m "$m" -p "The capital of France is" -n 8 2>/dev/null | tr -d '\n' | head -c 60)
  echo "| $(basename "$m") | $tokenizer | $cont | $logit | \"$gen\" | $("$here/serve_check.sh" "$m") |"
  [ "$pass" = 1 ] || echo "  (see $log)" >&2
done
