#!/usr/bin/env bash
# Records what a benchmark printed as a committed report, so that a figure quoted in docs/ has a source
# of record (crates/lab/tests/published_figures.rs checks every figure of a section that cites one):
#
#   scripts/record.sh NAME -- COMMAND [ARGS...]
#
# runs COMMAND and writes experiments/results/NAME/report.md: the command, the revision it ran at (and
# whether the tree had uncommitted changes), when, the machine (CPU model, cores, memory, load before the
# run), and everything the command printed. The report is written whole or not at all (a temporary file
# renamed over it), and only over a report this script wrote: a report.md without its marker, or any
# other file in the folder, is left alone. A command that fails leaves no report and passes its status on.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/record.sh NAME -- COMMAND [ARGS...]" >&2; exit 2; }
[ $# -ge 3 ] && [ "$2" = "--" ] || usage
name=$1
shift 2
case "$name" in
  ""|*/*|.*|*[!A-Za-z0-9._-]*) echo "record: NAME '$name' must be letters, digits, '.', '_' or '-' (a folder under experiments/results)" >&2; exit 2 ;;
esac

marker='<!-- written by scripts/record.sh -->'
# SHARPDRAFT_RECORD_RESULTS moves the results folder (the script's own tests write into a scratch one).
folder=${SHARPDRAFT_RECORD_RESULTS:-experiments/results}/$name
report=$folder/report.md
if [ -e "$report" ] && ! head -n 1 "$report" | grep -qxF "$marker"; then
  echo "record: $report was not written by this script; move it away first (nothing changed)" >&2
  exit 1
fi
revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && revision="$revision with uncommitted changes"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
cores=$(nproc 2>/dev/null || echo "?")
memory=$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo 2>/dev/null || echo "?")
load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
started=$(date -u '+%Y-%m-%d %H:%M UTC')

output=$(mktemp)
partial=
trap 'rm -f "$output" $partial' EXIT
status=0
"$@" >"$output" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  cat "$output" >&2
  echo "record: the command exited with $status; no report written" >&2
  exit "$status"
fi

mkdir -p "$folder"
partial=$(mktemp "$folder/.report.md.XXXXXX")
{
  echo "$marker"
  echo "# $name"
  echo
  echo "Recorded by \`scripts/record.sh\`: what the command below printed, unedited."
  echo
  echo "- command: \`$*\`"
  echo "- revision: $revision"
  echo "- started: $started, took $SECONDS s"
  echo "- machine: ${cpu:-unknown CPU}, $cores cores, $memory; load average before the run: $load"
  echo
  echo '```text'
  cat "$output"
  echo '```'
} >"$partial"
chmod 644 "$partial"
mv -f "$partial" "$report"
echo "wrote $report"
