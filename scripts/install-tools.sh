#!/usr/bin/env bash
# Installs the OS tools a command drives, with apt-get, when one is missing; says what it installs. Exit 1
# when it cannot.
#   install-tools.sh           what the tests drive: the local cluster's tools, plus openssl, ssh-keygen,
#                              kubectl, curl, systemd-analyze, and chromium for the console's browser tests
#   install-tools.sh cluster   what `deno task cluster up` (npm start) drives: swtpm, tpm2-tools,
#                              cryptsetup, ip, ps
set -uo pipefail
# cryptsetup lives in /usr/sbin, which a user's PATH often leaves out (the tasks add it as well).
export PATH="$PATH:/usr/sbin:/sbin"
cluster_tools=(swtpm:swtpm swtpm_ioctl:swtpm-tools tpm2_quote:tpm2-tools cryptsetup:cryptsetup-bin ps:procps
  ip:iproute2)
test_tools=(openssl:openssl ssh-keygen:openssh-client kubectl:kubectl curl:curl systemd-analyze:systemd
  chromium:chromium)
case "${1:-tests}" in
  cluster) tools=("${cluster_tools[@]}") ;;
  tests) tools=("${cluster_tools[@]}" "${test_tools[@]}") ;;
  *) echo "usage: install-tools.sh [cluster|tests]" >&2; exit 2 ;;
esac
missing=()
for tool in "${tools[@]}"; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool##*:}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing ${missing[*]} (apt-get)" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null \
  || {
    echo "could not install ${missing[*]}; install them and rerun" >&2
    if [[ " ${missing[*]} " == *" kubectl "* ]]; then
      echo "(Debian 12's own archive has no kubectl: see https://kubernetes.io/docs/tasks/tools/install-kubectl-linux/)" >&2
    fi
    exit 1
  }
