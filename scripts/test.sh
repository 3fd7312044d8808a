#!/usr/bin/env bash
# Runs the whole test suite: unit tests, the real-model tests (conformance with
# llama.cpp's recorded outputs) and the CLI error paths.
#   scripts/test.sh             release build, every test
#   scripts/test.sh --sanitize  ASan+UBSan build, unit tests; ThreadSanitizer
#                               build, the tests of concurrent clients and the
#                               server's integration tests; 30 s of each
#                               libFuzzer target (ASan+UBSan)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/fetch_vocabs.sh"  # the tokenizer tests' data (tests/vocab_test.cpp)
"$root/scripts/fetch_gemma.sh" >/dev/null  # the Gemma 3 tests (tests/gemma_test.cpp, gemma3_conformance)
# ccache (when set-up could install it) keys objects by paths relative to the
# tree, so a fresh clone reuses what an earlier build of the same sources made.
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-12G}"
# The sanitizer builds keep line tables only (-g1: a report's stack still names
# file and line) and build only what their tests run.
san_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
if [ "${1:-}" = "--sanitize" ]; then
  dir="$root/build-sanitize"
  [ -f "$dir/build.ninja" ] || cmake -S "$root" -B "$dir" -G Ninja -DCHUNKSERVE_SANITIZE=ON "${san_flags[@]}" >/dev/null
  ninja -C "$dir" --quiet unit_tests dequant_tool jinja_tool
  cd "$dir"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -L unit -j2
  tsan="$root/build-tsan"
  [ -f "$tsan/build.ninja" ] || cmake -S "$root" -B "$tsan" -G Ninja -DCHUNKSERVE_TSAN=ON "${san_flags[@]}" >/dev/null
  ninja -C "$tsan" --quiet thread_tests chunkserve
  cd "$tsan"
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/tests/tsan.supp"
  ctest --output-on-failure -L threads
  # Schema-encoding tests that add no concurrency are left to the release run
  # (CHUNKSERVE_TSAN_LIGHT; minutes each under the sanitizer), and so are the
  # structured-output tests (their server paths are test_api's; long prompts
  # take minutes each under the sanitizer; their parsers run under ASan above).
  # test_scaleout: the engine thread hands KV events to the publisher thread.
  # Each server computes on one thread, so the three files run at once (the
  # release run's ctest -j2 loads the machine as much); their logs follow in
  # turn, and any failure fails the run.
  logs=$(mktemp -d)
  pids=()
  for t in test_api test_hardening test_scaleout; do
    CHUNKSERVE_TSAN_LIGHT=1 CHUNKSERVE_SERVER_ARGS="--threads 1" python3 "$root/tests/server/$t.py" "$tsan/chunkserve" \
      "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" > "$logs/$t.log" 2>&1 &
    pids+=($!)
  done
  failed=0
  for i in 0 1 2; do wait "${pids[$i]}" || failed=1; done
  for t in test_api test_hardening test_scaleout; do echo "== $t (ThreadSanitizer)"; cat "$logs/$t.log"; done
  rm -rf "$logs"
  [ $failed = 0 ] || { echo "a server test failed under ThreadSanitizer" >&2; exit 1; }
  unset TSAN_OPTIONS
  "$root/scripts/fuzz.sh" 24  # 11 targets, one per core at a time: 2 minutes on 2 cores
else
  dir="$root/build"
  "$root/scripts/build.sh" "$dir"
  cd "$dir"
  ctest --output-on-failure -j2
fi
