#!/usr/bin/env bash
# Installs the OS tools the local cluster and the tests drive (swtpm, tpm2-tools, cryptsetup, openssl,
# ssh-keygen, kubectl, ip, ps, curl, systemd-analyze, and chromium for the console's browser tests) with
# apt-get when one is missing; says what it installs. Exit 1 when it cannot.
set -uo pipefail
missing=()
for tool in swtpm:swtpm swtpm_ioctl:swtpm-tools tpm2_quote:tpm2-tools cryptsetup:cryptsetup-bin ps:procps \
  ip:iproute2 openssl:openssl ssh-keygen:openssh-client kubectl:kubectl curl:curl systemd-analyze:systemd \
  chromium:chromium; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool##*:}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing ${missing[*]} (apt-get)" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null \
  || { echo "could not install ${missing[*]}; install them and rerun" >&2; exit 1; }
