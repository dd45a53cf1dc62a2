#!/usr/bin/env bash
# The whole test suite: installs the OS tools the tests drive (swtpm, tpm2-tools,
# cryptsetup, openssl, ssh-keygen, kubectl, curl) when missing, runs the static checks and every
# test, and ends with the line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$PATH" NO_COLOR=1 RUST_BACKTRACE=0 DENO_NO_PROMPT=1

missing=()
for tool in swtpm:swtpm swtpm_ioctl:swtpm-tools tpm2_quote:tpm2-tools cryptsetup:cryptsetup-bin ps:procps ip:iproute2 \
  openssl:openssl ssh-keygen:openssh-client kubectl:kubectl curl:curl; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool##*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} (apt-get)" >&2
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null \
    || { echo "could not install ${missing[*]}; install them and rerun" >&2; echo "0 passed, 1 failed"; exit 1; }
fi

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
