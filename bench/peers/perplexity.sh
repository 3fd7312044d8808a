#!/usr/bin/env bash
# Fidelity, both engines against one truth: perplexity of chunkserve (fast
# path) and of llama.cpp's llama-perplexity over the same text, windows and
# context; and the KL divergence of each engine's next-token distributions
# from chunkserve's float reference (fp32 weights and activations), which
# `chunkserve perplexity --kl-against-reference --save-kl-base` writes in
# llama-perplexity's --kl-divergence-base format, so llama.cpp measures its
# own KL from the same distributions. Needs build_llama_cpp.sh to have run.
#   CTX=512 CHUNKS=40 THREADS=2 [FILE=text] bench/peers/perplexity.sh
# Default text: the ChunkAttention and Prompt Cache papers (../shared/papers/
# 000_* and 003_*), concatenated.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
MODEL=${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
CTX=${CTX:-512}
CHUNKS=${CHUNKS:-40}
THREADS=${THREADS:-2}
bin="$here/.work/llama.cpp/build/bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "${FILE:-}" ]; then
  FILE="$work/corpus.txt"
  cat "$root"/../shared/papers/000_*.txt "$root"/../shared/papers/003_*.txt > "$FILE"
fi
echo "perplexity: chunkserve, fast path against the float reference ($CHUNKS windows of $CTX)" >&2
ours=$("$root/build/chunkserve" perplexity -m "$MODEL" -f "$FILE" --ctx "$CTX" --chunks "$CHUNKS" --threads "$THREADS" \
       --kl-against-reference --save-kl-base "$work/reference.kld" --json 2>/dev/null)
echo "perplexity: llama-perplexity" >&2
LD_LIBRARY_PATH="$bin" "$bin/llama-perplexity" -m "$MODEL" -f "$FILE" -c "$CTX" --chunks "$CHUNKS" -t "$THREADS" \
  > "$work/ppl.log" 2>&1
echo "perplexity: llama-perplexity --kl-divergence against chunkserve's reference" >&2
LD_LIBRARY_PATH="$bin" "$bin/llama-perplexity" -m "$MODEL" -c "$CTX" --chunks "$CHUNKS" -t "$THREADS" \
  --kl-divergence-base "$work/reference.kld" --kl-divergence > "$work/kld.log" 2>&1
python3 - "$ours" "$work/ppl.log" "$work/kld.log" "$CTX" "$CHUNKS" <<'PY'
import json, re, sys
ours = json.loads(sys.argv[1])
ppl_log = open(sys.argv[2], encoding="utf-8", errors="replace").read()
kld_log = open(sys.argv[3], encoding="utf-8", errors="replace").read()
m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", ppl_log)
if not m:
    sys.exit("llama-perplexity printed no final estimate:\n" + ppl_log[-2000:])
their_ppl, their_err = float(m.group(1)), float(m.group(2))
def grab(pattern):
    m = re.search(pattern, kld_log)
    if not m:
        sys.exit(f"llama-perplexity --kl-divergence printed no '{pattern}':\n" + kld_log[-2000:])
    return float(m.group(1))
base_ppl = grab(r"Mean PPL\(base\)\s*:\s*([0-9.]+)")
their_kl = grab(r"Mean\s+KLD:\s*(-?[0-9.]+)")
their_kl_err = grab(r"Mean\s+KLD:\s*-?[0-9.]+\s*±\s*([0-9.]+)")
their_p99 = grab(r"99\.0%\s+KLD:\s*(-?[0-9.]+)")
their_same = grab(r"Same top p:\s*([0-9.]+)")
print(f"{ours['windows']} windows of {sys.argv[4]} tokens ({ours['tokens_scored']} tokens scored)\n")
print("| | chunkserve | llama.cpp | ratio |")
print("|---|---|---|---|")
print(f"| PPL | {ours['ppl']:.4f} +/- {ours['ppl_error']:.4f} | {their_ppl:.4f} +/- {their_err:.4f} | "
      f"{ours['ppl'] / their_ppl:.4f} |")
print(f"| mean KL from the float reference (nats) | {ours['kl_mean']:.6f} +/- {ours['kl_mean_error']:.6f} | "
      f"{their_kl:.6f} +/- {their_kl_err:.6f} | "
      f"{ours['kl_mean'] / their_kl if their_kl > 0 else float('nan'):.3f} |")
print(f"| 99th percentile KL | {ours['kl_p99']:.6f} | {their_p99:.6f} | |")
print(f"| top-1 token as the reference's | {100 * (1 - ours['top1_differ']):.2f}% | {their_same:.2f}% | |")
print(f"\nfloat reference PPL: {ours['reference_ppl']:.4f} (llama.cpp read from its file: {base_ppl:.4f})")
PY
