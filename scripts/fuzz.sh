#!/usr/bin/env bash
# Runs every Fuzz* target in the module for a short time each.
set -euo pipefail
t=${1:-10s}
grep -rl --include='*_test.go' '^func Fuzz' . | xargs -r -n1 dirname | sort -u | while read -r dir; do
  for f in $(grep -h '^func Fuzz' "$dir"/*_test.go | sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/'); do
    echo "fuzz $dir $f ($t)"
    go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$dir" >/tmp/fuzz-$f.log 2>&1 || { cat /tmp/fuzz-$f.log; exit 1; }
  done
done
