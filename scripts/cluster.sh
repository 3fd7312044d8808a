#!/usr/bin/env bash
# Runs N chunkserve replicas on this machine behind vllm-router (PyPI, in the
# project's .venv; scripts/setup.sh installs it), all on loopback, until
# Ctrl-C (or SIGTERM), which stops them all.
#
#   scripts/cluster.sh [--replicas N] [--policy P] [--port PORT] [--threads T]
#                      [--kv-memory SIZE] [--kv-disk DIR] [--model GGUF] [-- serve options...]
#
# The router listens on PORT (default 8080); replica i on PORT+1+i, with its
# KV events (vLLM's format, ZMQ) on PORT+100+2i and their replay socket on
# PORT+101+2i; the router's own metrics on PORT+99. --policy is the router's: kv_aware (default: routes on the
# replicas' KV events, the blocks each one holds), cache_aware (the router's
# own guess from the prompts' text), round_robin, power_of_two, ... Each
# replica gets T threads (default: the cores split between the replicas).
# --kv-disk DIR gives replica i the disk tier DIR/replica-i: restarted, it
# serves the prompts it held from disk.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

replicas=2 policy=kv_aware port=8080 threads=0 kv_memory=1G kv_disk="" model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas) replicas=$2; shift 2 ;;
    --policy) policy=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --kv-memory) kv_memory=$2; shift 2 ;;
    --kv-disk) kv_disk=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cluster: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$replicas" -ge 1 ] 2>/dev/null || { echo "cluster: --replicas must be a positive number" >&2; exit 2; }
[ "$threads" -gt 0 ] || threads=$(( $(nproc) / replicas > 0 ? $(nproc) / replicas : 1 ))
binary=${CHUNKSERVE_BINARY:-$root/build/chunkserve}
router=${VLLM_ROUTER:-$root/.venv/bin/vllm-router}
[ -x "$binary" ] || { "$root/scripts/setup.sh" && "$root/scripts/build.sh" "$root/build" >/dev/null; }
[ -x "$router" ] || "$root/scripts/setup.sh"

pids=()
stop() {
  trap - INT TERM EXIT
  [ ${#pids[@]} -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT

workers=() sources=() replays=()
for ((i = 0; i < replicas; i++)); do
  p=$((port + 1 + i)) ev=$((port + 100 + 2 * i)) rp=$((port + 101 + 2 * i))
  disk=()
  [ -z "$kv_disk" ] || disk=(--kv-disk "$kv_disk/replica-$i")
  "$binary" serve -m "$model" --port "$p" --threads "$threads" --kv-memory "$kv_memory" ${disk[@]+"${disk[@]}"} \
    --kv-events "tcp://127.0.0.1:$ev" --kv-events-replay "tcp://127.0.0.1:$rp" ${extra[@]+"${extra[@]}"} \
    2> >(sed -u "s/^/[replica $i] /" >&2) &
  pids+=($!)
  workers+=("http://127.0.0.1:$p")
  sources+=(--kv-event-source "http://127.0.0.1:$p=tcp://127.0.0.1:$ev")
  replays+=(--kv-event-replay-source "http://127.0.0.1:$p=tcp://127.0.0.1:$rp")
done

# Every replica answers /health before the router starts (bounded: 120 s).
for w in "${workers[@]}"; do
  for ((t = 0; t < 1200; t++)); do
    curl -sf "$w/health" >/dev/null 2>&1 && break
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || { echo "cluster: a replica exited" >&2; exit 1; }; done
    sleep 0.1
  done
  curl -sf "$w/health" >/dev/null 2>&1 || { echo "cluster: $w did not start" >&2; exit 1; }
done

args=(--host 127.0.0.1 --port "$port" --prometheus-port $((port + 99)) --worker-urls "${workers[@]}" --policy "$policy"
      --log-level warning
      --health-check-interval-secs 2 --health-failure-threshold 2)
if [ "$policy" = kv_aware ]; then
  # The router asks each replica to tokenize (POST /tokenize) and hashes the
  # tokens at the events' block size; the model identity is a name here.
  model_id=$(basename "$model" .gguf)
  args+=("${sources[@]}" "${replays[@]}" --kv-event-block-size 16 --kv-event-model "$model_id")
fi
"$router" "${args[@]}" 2> >(sed -u "s/^/[router] /" >&2) &
router_pid=$!
pids+=("$router_pid")
echo "cluster: $replicas replicas (${threads} threads each) behind vllm-router ($policy) on http://127.0.0.1:$port/v1" >&2
# A replica that dies is the router's to route around; the cluster ends with the router.
wait "$router_pid" || true
echo "cluster: the router exited; stopping the replicas" >&2
