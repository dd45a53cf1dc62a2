#!/usr/bin/env bash
# Static checks: formatting, lint, protobuf lint, generated code up to date, type check.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$PATH"

deno fmt --check
deno lint
buf lint

gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
buf generate --output "$gen"
if ! diff -r "$gen/src/gen" src/gen >/dev/null; then
  echo "src/gen is out of date with proto/: run 'deno task gen' and commit the result" >&2
  diff -r "$gen/src/gen" src/gen | head -20 >&2
  exit 1
fi

deno check src/ tests/ scripts/
echo "check: ok"
