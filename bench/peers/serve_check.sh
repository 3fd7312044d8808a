#!/usr/bin/env bash
# Prints "yes" when `chunkserve serve -m MODEL` answers one chat request with
# text (HTTP 200 and a non-empty reply), "no" otherwise. The server listens on
# loopback and is stopped before this returns; at most 60 s of waiting.
#   bench/peers/serve_check.sh MODEL
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
m=$1
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
"$root/build/chunkserve" serve -m "$m" --host 127.0.0.1 --port "$port" > "$work/serve.log" 2>&1 &
pid=$!
served=no
model=$(basename "$m" .gguf)
for _ in $(seq 60); do
  code=$(curl -s -o "$work/reply.json" -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" \
         -H 'Content-Type: application/json' \
         -d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":4}" \
         2>/dev/null || true)
  if [ "$code" != "000" ]; then
    [ "$code" = 200 ] && grep -q '"content":"[^"]' "$work/reply.json" && served=yes
    break
  fi
  sleep 1
done
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
rm -rf "$work"
echo "$served"
