#!/usr/bin/env bash
# Prefill (pp) and single-sequence decode (tg) tokens/s: chunkserve next to
# llama.cpp's llama-bench, same model file, same threads, one run. Prints a
# Markdown table with the ratio. Needs build_llama_cpp.sh to have run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
MODEL=${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-5}
lb="$here/.work/llama.cpp/build/bin/llama-bench"
ours=$("$root/build/chunkserve" bench model -m "$MODEL" -t "$THREADS" -p "$PP" -n "$TG" -r "$REPS" --json)
theirs=$("$lb" -m "$MODEL" -t "$THREADS" -p "$PP" -n "$TG" -r "$REPS" -o json 2>/dev/null)
python3 - "$ours" "$theirs" "$PP" "$TG" "$THREADS" <<'PY'
import json, sys
ours = json.loads(sys.argv[1]); theirs = json.loads(sys.argv[2])
pp, tg, th = sys.argv[3], sys.argv[4], sys.argv[5]
ts = {("pp" if t["n_prompt"] else "tg"): t["avg_ts"] for t in theirs}
print(f"| test | threads | chunkserve tok/s | llama.cpp tok/s | ratio |")
print(f"|---|---|---|---|---|")
print(f"| pp{pp} | {th} | {ours['pp_tps']:.1f} | {ts['pp']:.1f} | {ours['pp_tps']/ts['pp']:.2f}x |")
print(f"| tg{tg} | {th} | {ours['tg_tps']:.1f} | {ts['tg']:.1f} | {ours['tg_tps']/ts['tg']:.2f}x |")
PY
