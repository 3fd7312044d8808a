#!/usr/bin/env bash
# Builds the libFuzzer targets with clang under ASan+UBSan and runs each for
# SECONDS (default 60) from its committed seed corpus (copied, so the run's
# new inputs stay in the build directory). Exits non-zero on any crash.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     targets: request messages responses tokenizer gguf pml jinja grammar kvfile nesting calls
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(request messages responses tokenizer gguf pml jinja grammar kvfile nesting calls)
out="$root/build-fuzz"
mkdir -p "$out"
model=${CHUNKSERVE_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$root/src" -I"$root/.deps/xgrammar/include" -DCS_MODEL="\"$model\"" -Wall -Wextra)
common=(src/model/gguf.cpp src/base/mapped_file.cpp src/model/ggml_types.cpp)
text=(src/model/tokenizer.cpp src/model/pre_tokenizer.cpp src/model/regex.cpp)
jinja=(src/jinja/value.cpp src/jinja/lexer.cpp src/jinja/parser.cpp src/jinja/methods.cpp src/jinja/filters.cpp
       src/jinja/template.cpp)
declare -A sources=(
  [gguf]="${common[*]}"
  [tokenizer]="${common[*]} ${text[*]}"
  [request]="${common[*]} ${text[*]} ${jinja[*]} src/model/chat_template.cpp src/server/api_request.cpp src/server/reasoning.cpp src/server/tool_calls.cpp src/grammar/xml_kind.cpp src/grammar/messages.cpp src/grammar/schema_check.cpp src/grammar/limits.cpp src/engine/validate.cpp src/pml/parse.cpp src/pml/src_files.cpp"
  [messages]="${common[*]} ${text[*]} ${jinja[*]} src/model/chat_template.cpp src/server/api_request.cpp src/server/reasoning.cpp src/server/messages_api.cpp src/server/tool_calls.cpp src/server/call_stream.cpp src/grammar/xml_kind.cpp src/grammar/messages.cpp src/grammar/schema_check.cpp src/grammar/limits.cpp src/engine/validate.cpp src/pml/parse.cpp src/pml/src_files.cpp"
  [responses]="${common[*]} ${text[*]} ${jinja[*]} src/model/chat_template.cpp src/server/api_request.cpp src/server/reasoning.cpp src/server/responses_api.cpp src/server/response_store.cpp src/server/tool_calls.cpp src/server/call_stream.cpp src/grammar/xml_kind.cpp src/grammar/messages.cpp src/grammar/schema_check.cpp src/grammar/limits.cpp src/engine/validate.cpp src/pml/parse.cpp src/pml/src_files.cpp"
  [pml]="src/pml/parse.cpp src/pml/src_files.cpp src/pml/layout.cpp src/pml/assemble.cpp"
  [jinja]="${jinja[*]}"
  [grammar]="${common[*]} ${text[*]} src/grammar/grammar.cpp src/grammar/xml_kind.cpp src/grammar/messages.cpp src/grammar/schema_check.cpp src/grammar/limits.cpp src/grammar/compile_process.cpp src/base/threads.cpp"
  [kvfile]="src/kv/kv_file.cpp"
  [calls]="src/server/call_stream.cpp src/server/tool_calls.cpp src/server/reasoning.cpp src/grammar/grammar.cpp src/grammar/xml_kind.cpp src/grammar/messages.cpp src/grammar/schema_check.cpp src/grammar/limits.cpp src/grammar/compile_process.cpp src/base/threads.cpp ${common[*]} ${text[*]}"
  [nesting]="${common[*]} ${text[*]} ${jinja[*]} src/model/chat_template.cpp src/server/api_request.cpp src/server/reasoning.cpp src/server/tool_calls.cpp src/grammar/xml_kind.cpp src/grammar/messages.cpp src/grammar/schema_check.cpp src/grammar/limits.cpp src/engine/validate.cpp src/pml/parse.cpp src/pml/src_files.cpp"
)
# Each source is compiled once into build-fuzz/obj (the targets share most of
# them), two at a time, through ccache when set-up installed it.
cxx=(clang++)
command -v ccache >/dev/null && cxx=(ccache clang++)
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true
objdir="$out/obj"
mkdir -p "$objdir"
declare -A wanted=()
for t in "${targets[@]}"; do
  for s in ${sources[$t]} tests/fuzz/fuzz_$t.cpp; do wanted[$s]=1; done
done
obj_of() { local s=$1; echo "$objdir/${s//\//_}.o"; }
stale=()
for s in "${!wanted[@]}"; do
  o=$(obj_of "$s")
  # Rebuild when the source or anything under src/ or tests/fuzz is newer.
  if [ ! -f "$o" ] || [ -n "$(find "$root/tests/fuzz" "$root/src" -newer "$o" -name '*.[ch]*' | head -1)" ]; then
    stale+=("$s")
  fi
done
if [ ${#stale[@]} -gt 0 ]; then
  export root objdir
  printf '%s\n' "${stale[@]}" | xargs -P 2 -I{} bash -c \
    'o="$0/$(echo "$1" | tr / _).o"; '"${cxx[*]} ${flags[*]@Q}"' -c "$root/$1" -o "$o"' "$objdir" {}
fi
for t in "${targets[@]}"; do
  objs=("$(obj_of "tests/fuzz/fuzz_$t.cpp")")
  for s in ${sources[$t]}; do objs+=("$(obj_of "$s")"); done
  clang++ -fsanitize=fuzzer,address,undefined "${objs[@]}" -lpcre2-8 -lpugixml -lxxhash \
    "$root/.deps/xgrammar/lib/libxgrammar.a" -o "$out/fuzz_$t"
  corpus="$out/corpus_$t"
  mkdir -p "$corpus"
  cp -n "$root/tests/fuzz/corpus/$t/"* "$corpus/" 2>/dev/null || true
  # The real chat templates fetched for the tests seed the template fuzzer too.
  [ "$t" = jinja ] && cp -n "$root/tests/data/templates/"*.jinja "$corpus/" 2>/dev/null || true
done
# One fuzzer per core at a time (each is one process on one thread), each
# for the full SECONDS; their summaries are printed in target order.
fuzz_one() {
  local t=$1
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$out/fuzz_$t" "$out/corpus_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
    -artifact_prefix="$out/crash_${t}_" -print_final_stats=1 2>&1 |
    grep -E "stat::number_of_executed_units|stat::peak_rss|ERROR|SUMMARY|Test unit written|#[0-9]+ *DONE" || true
}
at_once=$(nproc)
logs=$(mktemp -d)
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$at_once" ]; then wait -n || true; running=$((running - 1)); fi
  fuzz_one "$t" > "$logs/$t.log" &
  running=$((running + 1))
done
wait
failed=0
for t in "${targets[@]}"; do
  echo "fuzz: $t for ${secs}s"
  cat "$logs/$t.log"
  if ls "$out"/crash_"${t}"_* >/dev/null 2>&1; then
    echo "fuzz: $t found a failing input: $(ls "$out"/crash_"${t}"_*)" >&2
    failed=1
  fi
done
rm -rf "$logs"
exit $failed
