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
if [ "$fuzz_seconds" != "0" ]; then
  for file in $(grep -rl --include='*_test.go' '^func Fuzz' .); do
    pkg="./$(dirname "${file#./}")"
    for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
      go test -run '^$' -fuzz "^${target}\$" -fuzztime "${fuzz_seconds}s" "$pkg" >/dev/null \
        || { echo "fuzz target $target in $pkg found a failure (input saved under testdata/fuzz; replay: go test -run ^${target}\$ $pkg)"; go test -run "^${target}\$" "$pkg"; exit 1; }
      echo "fuzz ok: $pkg $target (${fuzz_seconds}s)"
    done
  done
fi

go test ./...
