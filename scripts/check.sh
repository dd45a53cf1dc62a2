#!/usr/bin/env bash
# Static checks: formatting, lint, protobuf lint, generated code up to date, type check, documentation.
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

# Every exported symbol of the hand-written code documented (generated code and the @peculiar/x509 shim
# are not ours to document; scripts/doc_lint.ts says which references to their types it waives).
documented=$(find src -name '*.ts' -not -path 'src/gen/*' -not -path 'src/x509/x509.ts' | sort)
# shellcheck disable=SC2086 # one argument per file
{ NO_COLOR=1 deno doc --lint $documented 2>&1 || true; } |
  deno run --no-prompt --allow-read=src scripts/doc_lint.ts $documented
echo "check: ok"
