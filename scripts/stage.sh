#!/usr/bin/env bash
# make test's stages, timed: `stage.sh NAME COMMAND...` runs COMMAND and
# appends "NAME SECONDS" to target/stage-times; `stage.sh --report` prints
# them (make test does, at its end, so every CI log says where its time
# went).
set -euo pipefail
cd "$(dirname "$0")/.."
times=target/stage-times
if [ "${1:-}" = "--report" ]; then
  [ -f "$times" ] || exit 0
  awk '{ total += $2; printf "stage: %-10s %5d s\n", $1, $2 } END { printf "stage: %-10s %5d s\n", "total", total }' "$times"
  exit 0
fi
[ $# -ge 2 ] || { echo "usage: stage.sh NAME COMMAND... | stage.sh --report" >&2; exit 2; }
name=$1
shift
start=$(date +%s)
"$@"
mkdir -p target
echo "$name $(($(date +%s) - start))" >>"$times"
