#!/usr/bin/env bash
# Runs a command and checks its exit status and what it printed (stdout and
# stderr together): cli_expect.sh STATUS REGEX COMMAND [ARGS...]
# STATUS is a number, or "nonzero". REGEX is an extended regular expression.
set -u
want=$1 regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
if [ "$want" = nonzero ]; then
  [ $rc -ne 0 ] || { echo "expected a failure, got exit 0; output:"; echo "$out"; exit 1; }
elif [ $rc -ne "$want" ]; then
  echo "expected exit $want, got $rc; output:"; echo "$out"; exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  echo "output does not match /$regex/:"; echo "$out"; exit 1
fi
echo "ok: exit $rc, output matches /$regex/"
