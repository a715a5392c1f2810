#!/usr/bin/env bash
# The test command: vet, a short run of every fuzz target, then every test
# (unit, rapid, simulator sweep, WAL, transport, client, end-to-end against
# real `fibril serve` processes), whose summary closes the output. FIBRIL_FUZZ_SECONDS sets the fuzz time per
# target (default 1; 0 skips fuzzing).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"

go vet ./...

fuzz_seconds="${FIBRIL_FUZZ_SECONDS:-1}"
fuzz_log="$(mktemp)"
trap 'rm -f "$fuzz_log"' EXIT
# fuzz_once runs one target; it fails only when the fuzzer found an input that
# breaks the code (it then writes it under testdata/fuzz). A fuzzer that dies
# for another reason (a worker killed or starved on a loaded machine) is
# retried once and then reported, not counted as a finding.
fuzz_once() {
  go test -run '^$' -fuzz "^$2\$" -fuzztime "${fuzz_seconds}s" "$1" >"$fuzz_log" 2>&1
}
if [ "$fuzz_seconds" != "0" ]; then
  for file in $(grep -rl --include='*_test.go' '^func Fuzz' .); do
    pkg="./$(dirname "${file#./}")"
    for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
      if fuzz_once "$pkg" "$target" || { ! grep -q 'Failing input written to' "$fuzz_log" && fuzz_once "$pkg" "$target"; }; then
        echo "fuzz ok: $pkg $target (${fuzz_seconds}s)"
      elif grep -q 'Failing input written to' "$fuzz_log"; then
        cat "$fuzz_log"
        echo "fuzz target $target in $pkg found a failing input (saved under testdata/fuzz; replay: go test -run '^${target}\$' $pkg)"
        exit 1
      else
        echo "fuzz warning: $pkg $target did not run to the end twice (no failing input found):"
        tail -n 5 "$fuzz_log"
      fi
    done
  done
fi

go test ./...
