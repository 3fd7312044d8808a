#!/usr/bin/env bash
# Thread scaling (issue 46): chunkserve next to llama.cpp at 1, 2, 4, 8 and 16
# threads (those up to the machine's cores) on one model file: pp512 and
# tg128 (`chunkserve bench model` / llama-bench), the shared-prompt batch
# PP=4096 TG=32 B=32 (`chunkserve bench engine` / llama-batched-bench -pps
# -kvu, better of flash attention on and off) and the read roofline
# (`chunkserve bench attention`). Every chunkserve run also records its
# profile (--profile: each operation's time per step), so the report shows
# which operation stops scaling. The engines alternate within each round;
# thread counts run from the most down, so a run cut short keeps the
# figures that matter most. One JSON line per measurement goes to
# OUT/scaling.jsonl as it is made; bench/peers/scaling_report.py OUT makes
# the tables and the plot (OUT/scaling.png).
#   MODEL=/path/llama3-1b-Q4_K_M.gguf bench/peers/scaling.sh OUT
# Settings (environment): THREADS ("1 2 4 8 16"), ROUNDS (1), REPS (3),
# PP/TG (512/128), BATCH_PP/BATCH_TG/BATCH_B (4096/32/32), BATCH_THREADS
# (thread counts that run the batch; default THREADS), PEER_BATCH_THREADS
# (those where llama-batched-bench runs too; default BATCH_THREADS),
# CHUNKSERVE (build/chunkserve), LLAMA_BIN (build_llama_cpp.sh's bin).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: scaling.sh OUT_DIR}
MODEL=${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
cores=$(nproc)
THREADS=${THREADS:-1 2 4 8 16}
ROUNDS=${ROUNDS:-1}
REPS=${REPS:-3}
PP=${PP:-512}
TG=${TG:-128}
BATCH_PP=${BATCH_PP:-4096}
BATCH_TG=${BATCH_TG:-32}
BATCH_B=${BATCH_B:-32}
BATCH_THREADS=${BATCH_THREADS:-$THREADS}
PEER_BATCH_THREADS=${PEER_BATCH_THREADS:-$BATCH_THREADS}
CHUNKSERVE=${CHUNKSERVE:-$root/build/chunkserve}
LLAMA_BIN=${LLAMA_BIN:-$here/.work/llama.cpp/build/bin}
mkdir -p "$out"
jsonl="$out/scaling.jsonl"
: > "$jsonl"

# Thread counts up to the cores, most first.
counts=$(for t in $THREADS; do [ "$t" -le "$cores" ] && echo "$t"; done | sort -rn | uniq)
has() { for x in $2; do [ "$x" = "$1" ] && return 0; done; return 1; }
# record ENGINE TEST THREADS ROUND JSON: one line of the results.
record() {
  python3 -c 'import json,sys; e,t,th,r,raw=sys.argv[1:6]
print(json.dumps({"engine": e, "test": t, "threads": int(th), "round": int(r), "result": json.loads(raw)}))' \
    "$@" >> "$jsonl"
}
python3 -c 'import json,os,platform,sys
cpu = next((l.split(":",1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
print(json.dumps({"engine": "host", "test": "host", "threads": os.cpu_count(), "round": 0,
                  "result": {"cpu": cpu, "cores": int(sys.argv[1]), "model": sys.argv[2]}}))' "$cores" "$MODEL" >> "$jsonl"

ctx=$((BATCH_PP + BATCH_B * BATCH_TG + 256))
for round in $(seq "$ROUNDS"); do
  for t in $counts; do
    echo "scaling: round $round, $t threads" >&2
    "$CHUNKSERVE" bench attention --table3-only --np 64 --shared 0 --reps 1 --threads "$t" --json "$out/roof.json" \
      > /dev/null
    record chunkserve roofline "$t" "$round" "$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["roofline"]))' "$out/roof.json")"
    record chunkserve model "$t" "$round" \
      "$("$CHUNKSERVE" bench model -m "$MODEL" -t "$t" -p "$PP" -n "$TG" -r "$REPS" --profile --json)"
    record llama.cpp model "$t" "$round" \
      "$(LD_LIBRARY_PATH="$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$LLAMA_BIN/llama-bench" -m "$MODEL" -t "$t" \
          -p "$PP" -n "$TG" -r "$REPS" -o json 2>/dev/null | tr -d '\n')"
    if has "$t" "$BATCH_THREADS"; then
      record chunkserve batched "$t" "$round" \
        "$("$CHUNKSERVE" bench engine -m "$MODEL" -t "$t" --pp "$BATCH_PP" --tg "$BATCH_TG" --batch "$BATCH_B" \
            --profile --json | tail -1)"
      if has "$t" "$PEER_BATCH_THREADS"; then
        for fa in on off; do
          record llama.cpp "batched_fa_$fa" "$t" "$round" \
            "$(LD_LIBRARY_PATH="$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$LLAMA_BIN/llama-batched-bench" \
                -m "$MODEL" -t "$t" -c "$ctx" -b 2048 -ub 512 -npp "$BATCH_PP" -ntg "$BATCH_TG" -npl "$BATCH_B" \
                -pps -kvu -fa "$fa" --output-format jsonl 2>/dev/null | grep '"speed"' | tail -1)"
        done
      fi
    fi
  done
done
rm -f "$out/roof.json"
python3 "$here/scaling_report.py" "$out"
