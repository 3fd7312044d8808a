#!/usr/bin/env bash
# Prefill (pp) and single-sequence decode (tg) tokens/s: chunkserve next to
# llama.cpp's llama-bench, same model file, same threads. This machine's speed
# drifts by +-20% from minute to minute, so the two run alternately for ROUNDS
# rounds and the table gives medians and the median of per-round ratios.
# Needs build_llama_cpp.sh to have run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
MODEL=${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-128}
DEPTH=${DEPTH:-0}  # context tokens cached before each test (llama-bench -d)
KV=${KV:-f16}      # KV cache element type, both engines (f16 is both defaults)
REPS=${REPS:-3}
ROUNDS=${ROUNDS:-5}
lb="$here/.work/llama.cpp/build/bin/llama-bench"
out=$(mktemp)
for _ in $(seq "$ROUNDS"); do
  ours=$("$root/build/chunkserve" bench model -m "$MODEL" -t "$THREADS" -p "$PP" -n "$TG" -d "$DEPTH" --kv-type "$KV" -r "$REPS" --json)
  theirs=$("$lb" -m "$MODEL" -t "$THREADS" -p "$PP" -n "$TG" -d "$DEPTH" -ctk "$KV" -ctv "$KV" -r "$REPS" -o json 2>/dev/null | tr -d '\n')
  echo "$ours	$theirs" >> "$out"
done
python3 - "$out" "$PP" "$TG" "$THREADS" "$DEPTH" <<'PY'
import json, statistics as st, sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
pp, tg, th, depth = sys.argv[2:6]
at = f" @ d{depth}" if depth != "0" else ""
o = {"pp": [], "tg": []}; t = {"pp": [], "tg": []}; r = {"pp": [], "tg": []}
for ours, theirs in rows:
    a = json.loads(ours); b = {("pp" if x["n_prompt"] else "tg"): x["avg_ts"] for x in json.loads(theirs)}
    for k in ("pp", "tg"):
        o[k].append(a[k + "_tps"]); t[k].append(b[k]); r[k].append(a[k + "_tps"] / b[k])
print(f"| test | threads | chunkserve tok/s | llama.cpp tok/s | ratio (median of {len(rows)} rounds, range) |")
print("|---|---|---|---|---|")
for k, n in (("pp", pp), ("tg", tg)):
    print(f"| {k}{n}{at} | {th} | {st.median(o[k]):.1f} | {st.median(t[k]):.1f} | "
          f"{st.median(r[k]):.2f}x ({min(r[k]):.2f}-{max(r[k]):.2f}) |")
PY
rm -f "$out"
