#!/usr/bin/env bash
# The whole test suite: installs the OS tools the tests drive (scripts/install-tools.sh)
# when missing, runs the static checks and every
# test, and ends with the line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$PATH:/usr/sbin:/sbin" NO_COLOR=1 RUST_BACKTRACE=0 DENO_NO_PROMPT=1

bash scripts/install-tools.sh || { echo "0 passed, 1 failed"; exit 1; }

check_failed=0
deno task check || check_failed=1

out=$(mktemp)
trap 'rm -f "$out"' EXIT
deno task test "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}

summary=$(grep -E '^(ok|FAILED) \| [0-9]+ passed' "$out" | tail -1)
passed=$(sed -E 's/.*\| ([0-9]+) passed.*/\1/' <<<"$summary")
failed=$(sed -E 's/.*\| ([0-9]+) failed.*/\1/' <<<"$summary")
passed=${passed:-0}
failed=${failed:-0}
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi # the run broke before a summary
failed=$((failed + check_failed))
echo "${passed} passed, ${failed} failed"
[ "$rc" -eq 0 ] && [ "$check_failed" -eq 0 ]
