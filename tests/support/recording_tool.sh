#!/bin/bash
# A stand-in for an OS tool (systemctl, journalctl, kubeadm, cryptsetup) in tests.
# Driven by the directory in RECORDING_TOOL_DIR (see recording_tool.ts):
#   records   argv.N (NUL-separated), env.N, and for `--config F` a copy config.N plus its mode config-mode.N
#   prints    the files stdout and stderr, if present
#   then      execs RECORDING_TOOL_EXEC with the same arguments (a real tool behind the recorder),
#             or sleeps for the seconds in `sleep`,
#             or exits with the code in exit.N, else in `exit`, else 0.
set -u
dir="${RECORDING_TOOL_DIR:?RECORDING_TOOL_DIR is not set}"
# The environment as given, before this script sets its own PATH.
/usr/bin/env > "$dir/env.current"
PATH=/usr/bin:/bin
n=$(( $(cat "$dir/count" 2>/dev/null || echo 0) + 1 ))
mv "$dir/env.current" "$dir/env.$n"
printf '%s\0' "$@" > "$dir/argv.$n"
previous=""
for arg in "$@"; do
  if [ "$previous" = "--config" ]; then
    cp "$arg" "$dir/config.$n"
    stat -c %a "$arg" > "$dir/config-mode.$n"
  fi
  previous="$arg"
done
# Counted last, so a reader that sees the count finds the whole record.
echo "$n" > "$dir/count.new" && mv "$dir/count.new" "$dir/count"
if [ -f "$dir/stdout" ]; then cat "$dir/stdout"; fi
if [ -f "$dir/stderr" ]; then cat "$dir/stderr" >&2; fi
if [ -n "${RECORDING_TOOL_EXEC:-}" ]; then exec "$RECORDING_TOOL_EXEC" "$@"; fi
if [ -f "$dir/sleep" ]; then exec sleep "$(cat "$dir/sleep")"; fi
if [ -f "$dir/exit.$n" ]; then exit "$(cat "$dir/exit.$n")"; fi
if [ -f "$dir/exit" ]; then exit "$(cat "$dir/exit")"; fi
exit 0
