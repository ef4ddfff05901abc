#!/usr/bin/env bash
# Run clang-tidy 14 with the repository's .clang-tidy over every translation unit of the
# project (lib/, apps/, test/, perf/, plus test/fuzz/ and test/install/, which the default
# build leaves out) in parallel, and fail on any finding.  Headers under include/retexo/
# are checked through the config's HeaderFilterRegex as the sources include them.
#   test/run_clang_tidy.sh [regex...]     only the sources whose path matches a regex
# Environment: RETEXO_TIDY_BUILD  build directory for compile_commands.json (default
#              build-tidy/; configured here, nothing is compiled)
#              RETEXO_TIDY_JOBS   parallel clang-tidy processes (default: nproc)
#              CLANG_TIDY         the clang-tidy binary (default: clang-tidy-14)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RETEXO_TIDY_BUILD:-$root/build-tidy}
jobs=${RETEXO_TIDY_JOBS:-$(nproc)}
tidy=${CLANG_TIDY:-clang-tidy-14}

command -v "$tidy" >/dev/null || { echo "run_clang_tidy: $tidy not found (apt-get install clang-tidy-14)" >&2; exit 2; }

# compile_commands.json for every target (configure only; the build is not needed).
"$root/cmake/install-deps.sh" --test
cmake -S "$root" -B "$build" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DRETEXO_UNITY=OFF \
      -DRETEXO_BUILD_APPS=ON -DRETEXO_BUILD_TESTS=ON -DRETEXO_BUILD_PERF=ON >/dev/null

# The project's sources in the compilation database, then the ones outside the default
# build: clang-tidy infers their flags from their neighbours in the database (the fuzz
# targets' -fsanitize=fuzzer only matters for linking).
mapfile -t files < <(python3 - "$build/compile_commands.json" "$root" "$build" <<'EOF'
import json, os, sys
db, root, build = (os.path.realpath(a) for a in sys.argv[1:])
for f in sorted({os.path.realpath(os.path.join(e["directory"], e["file"])) for e in json.load(open(db))}):
    if f.startswith(root + os.sep) and not f.startswith(build + os.sep):
        print(f)
EOF
)
files+=("$root"/test/fuzz/*.cpp "$root"/test/install/*.cpp)
if [[ $# -gt 0 ]]; then
  pattern=$(IFS='|'; echo "$*")
  mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -E -- "$pattern" || true)
fi
[[ ${#files[@]} -gt 0 ]] || { echo "run_clang_tidy: no sources to check" >&2; exit 2; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "run_clang_tidy: $("$tidy" --version | grep -i version | head -1 | sed 's/^ *//'), ${#files[@]} sources, $jobs jobs"
start=$SECONDS
# One clang-tidy per source; its output goes to out/<n>.log and a failed run leaves out/<n>.fail.
export tidy build out root
# shellcheck disable=SC2016  # the bash -c script expands its own (exported) variables
printf '%s\n' "${files[@]}" | nl -nln -w1 -s' ' | xargs -d '\n' -n1 -P "$jobs" bash -c '
  n=${1%% *} f=${1#* } t0=$SECONDS
  if "$tidy" -p "$build" --quiet "$f" >"$out/$n.log" 2>&1; then status=ok; else status=FAIL; touch "$out/$n.fail"; fi
  printf "%-4s %3ds  %s\n" "$status" $((SECONDS - t0)) "${f#"$root"/}"' _
elapsed=$((SECONDS - start))

shopt -s nullglob
mapfile -t failing < <(for fail in "$out"/*.fail; do basename "$fail" .fail; done | sort -n)
# Every diagnostic with its notes and source excerpts, once: a header's findings repeat in
# every source that includes it.
report=$(cat "$out"/*.log | awk '
  function flush() { if (block != "" && !(block in seen)) { seen[block] = 1; printf "%s", block } block = "" }
  /^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter=|^Error while processing/ { next }
  /^[^ ].*:[0-9]+:[0-9]+: (warning|error): / { flush() }
  { block = block $0 "\n" }
  END { flush() }')
findings=$(grep -E '^[^ ].*:[0-9]+:[0-9]+: (warning|error): ' <<<"$report" || true)
echo
if [[ ${#failing[@]} -eq 0 && -z $findings ]]; then
  echo "run_clang_tidy: clean, ${#files[@]} sources in ${elapsed}s"
  exit 0
fi
echo "${report//"$root"\/}"
echo
if [[ -n $findings ]]; then
  echo "run_clang_tidy: findings by check:"
  grep -oE '\[[^]]+\]$' <<<"$findings" | sed -E 's/^\[//; s/\]$//; s/,-warnings-as-errors$//' | sort | uniq -c | sort -rn
fi
echo "run_clang_tidy: failing sources:"
for n in "${failing[@]}"; do echo "  ${files[n - 1]#"$root"/}"; done
echo "run_clang_tidy: FAILED, $(grep -c . <<<"$findings" || true) distinct findings in ${#failing[@]} of ${#files[@]} sources (${elapsed}s)"
exit 1
