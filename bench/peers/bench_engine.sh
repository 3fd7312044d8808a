#!/usr/bin/env bash
# Batched decoding with a shared prompt: `chunkserve bench engine` next to
# llama.cpp's llama-batched-bench -pps -kvu (prompt shared, unified KV cache),
# same model file, same threads. llama.cpp runs with flash attention on and
# off and the better of the two (by total tokens/s) is kept each round. The
# two engines alternate for ROUNDS rounds; the table gives medians and the
# median of per-round ratios. llama.cpp keeps sliding-window layers' KV in
# full (--swa-full): its default window-sized cache finds no slot for the
# shared prompt's 32 continuations (gpt-oss, Gemma 3), and it changes nothing
# for a model without windows. Needs build_llama_cpp.sh to have run.
#   PP=4096 TG=32 B=32 bench/peers/bench_engine.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
MODEL=${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
THREADS=${THREADS:-2}
PP=${PP:-4096}
TG=${TG:-32}
B=${B:-32}
MODE=${MODE:-tpp}
ROUNDS=${ROUNDS:-3}
bb="$here/.work/llama.cpp/build/bin/llama-batched-bench"
ctx=$((PP + B * TG + 256))
out=$(mktemp)
for _ in $(seq "$ROUNDS"); do
  ours=$("$root/build/chunkserve" bench engine -m "$MODEL" -t "$THREADS" --pp "$PP" --tg "$TG" --batch "$B" \
         --mode "$MODE" --json | tail -1)
  best=""
  for fa in on off; do
    line=$("$bb" -m "$MODEL" -t "$THREADS" -c "$ctx" -b 2048 -ub 512 -npp "$PP" -ntg "$TG" -npl "$B" -pps -kvu \
           -fa "$fa" --swa-full --output-format jsonl 2>/dev/null | grep '"speed"' | tail -1)
    best=$(python3 -c 'import json,sys; a,b=sys.argv[1],sys.argv[2]
print(b if not a or json.loads(b)["speed"] > json.loads(a)["speed"] else a)' "$best" "$line")
  done
  echo "$ours	$best" >> "$out"
done
python3 - "$out" "$PP" "$TG" "$B" "$THREADS" "$MODE" <<'PY'
import json, statistics as st, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
pp, tg, b, th, mode = sys.argv[2:7]
keys = (("prefill", "prefill_tps", "speed_pp"), ("decode", "decode_tps", "speed_tg"), ("total", "total_tps", "speed"))
print(f"PP={pp} TG={tg} B={b}, {th} threads; chunkserve --mode {mode} vs llama-batched-bench -pps -kvu (better of -fa on/off)")
print(f"| tokens/s | chunkserve | llama.cpp | ratio (median of {len(rows)} rounds, range) |")
print("|---|---|---|---|")
for name, ok, tk in keys:
    o = [json.loads(a)[ok] for a, _ in rows]; t = [json.loads(c)[tk] for _, c in rows]
    r = [x / y for x, y in zip(o, t)]
    print(f"| {name} | {st.median(o):.1f} | {st.median(t):.1f} | {st.median(r):.2f}x ({min(r):.2f}-{max(r):.2f}) |")
kv = [json.loads(a)["peak_kv_bytes"] for a, _ in rows]
fa = [json.loads(c).get("flash_attn") for _, c in rows]
print(f"chunkserve peak KV: {max(kv) / 2**20:.1f} MiB; llama.cpp flash attention kept: {fa}")
PY
rm -f "$out"
