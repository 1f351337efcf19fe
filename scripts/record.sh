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
# The name and folder are checked, and the folder made, before the command runs; once the command has
# finished well its output is never deleted: if the report cannot be written, the output is kept and named.
set -euo pipefail
# The repository's root, where experiments/results is, also when this script is run through a link.
cd "$(dirname "$(readlink -f "$0")")/.."

usage() { echo "usage: scripts/record.sh NAME -- COMMAND [ARGS...]" >&2; exit 2; }
[ $# -ge 3 ] && [ "$2" = "--" ] || usage
name=$1
shift 2
case "$name" in
  ""|*/*|.*|*[!A-Za-z0-9._-]*) echo "record: NAME '$name' must be letters, digits, '.', '_' or '-' (a folder under experiments/results)" >&2; exit 2 ;;
esac
[ ${#name} -le 200 ] || { echo "record: NAME is ${#name} characters; at most 200 (nothing ran)" >&2; exit 2; }

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

# The folder and the report's temporary file are made before the command runs, so that a name the
# filesystem refuses (too long, a file already there, no permission) costs nothing, not hours of output.
made_folder=
if [ ! -d "$folder" ]; then
  if [ -e "$folder" ] || [ -L "$folder" ]; then
    echo "record: $folder exists and is not a folder; give another NAME (nothing ran)" >&2
    exit 2
  fi
  mkdir -p -- "$folder" || { echo "record: cannot make $folder; give another NAME (nothing ran)" >&2; exit 2; }
  made_folder=1
fi
partial=$(mktemp "$folder/.report.md.XXXXXX") || { echo "record: cannot write in $folder (nothing ran)" >&2; exit 2; }
output=$(mktemp) || { rm -f -- "$partial"; echo "record: cannot make a temporary file (nothing ran)" >&2; exit 2; }
# What is cleaned up on exit: the temporary report always; the command's output only until the command
# has finished well, after which it is kept (and named) unless the report holds it.
finished=
written=
cleanup() {
  rm -f -- "$partial"
  if [ -n "$finished" ] && [ -z "$written" ]; then
    echo "record: the report was not written; the command's output is kept in $output" >&2
  else
    rm -f -- "$output"
  fi
  # A folder made here for a command that failed is removed when it is empty (rmdir removes nothing else).
  if [ -n "$made_folder" ] && [ -z "$written" ]; then rmdir -- "$folder" 2>/dev/null || true; fi
}
trap cleanup EXIT
status=0
"$@" >"$output" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  cat "$output" >&2
  echo "record: the command exited with $status; no report written" >&2
  exit "$status"
fi
finished=1

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
mv -f -- "$partial" "$report"
written=1
echo "wrote $report"
