#!/usr/bin/env bash
# One experiment under two builds of the command line, alternated: mimalloc, the default, and the
# system's malloc (`--no-default-features`; crates/cli/src/allocator.rs says why the default changed).
# An allocator is process-wide, so the two cannot share a process as an experiment's arms do; the runs
# alternate instead, so that a load that comes and goes falls on both builds alike, and each run's own
# speed-ups stay paired within its requests.
#
#   scripts/allocator-ab.sh [ALTERNATIONS] [EXPERIMENT]    (defaults: 3, experiments/allocator-smollm2.yaml)
#
# Builds both binaries (the second build recompiles only the command line's crate) and copies them to
# target/allocator-ab/, runs EXPERIMENT into a new folder runs/allocator-ab-<time>/<build>-<i> per run,
# then prints each run's headline rows (method, tau, speed-up, decode speed-up, tokens/s, the process's
# peak resident memory), where its
# cycles' time went (median drafting and verification ms, the target alone's ms per token) and, per
# build, the median decode speed-up of every method over the alternations. target/debug/sharpdraft is the
# default build again afterwards.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."

alternations=${1:-3}
experiment=${2:-experiments/allocator-smollm2.yaml}
case "$alternations" in ''|*[!0-9]*|0) echo "allocator-ab: ALTERNATIONS must be a positive integer, not '$alternations'" >&2; exit 2 ;; esac
[ -f "$experiment" ] || { echo "allocator-ab: no experiment file $experiment" >&2; exit 2; }

binaries=target/allocator-ab
mkdir -p "$binaries"
target_dir=${CARGO_TARGET_DIR:-target}
cargo build -q -p sharpdraft --no-default-features
cp "$target_dir/debug/sharpdraft" "$binaries/sharpdraft-system"
cargo build -q -p sharpdraft
cp "$target_dir/debug/sharpdraft" "$binaries/sharpdraft-mimalloc"
for build in system mimalloc; do
  echo "$build: $("$binaries/sharpdraft-$build" bench rows --rows 1 --context 16 --repeats 1 | tail -n 1 | grep -o 'allocator [^)]*)')"
done

runs=runs/allocator-ab-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$runs"
echo "runs: $runs; experiment: $experiment; $alternations alternations, the first build alternating too"
rows=$runs/rows.txt
costs=$runs/cycle-costs.txt
: > "$rows"
: > "$costs"
for i in $(seq 1 "$alternations"); do
  # Which build goes first alternates, as an experiment's arms rotate.
  if [ $((i % 2)) -eq 1 ]; then order="system mimalloc"; else order="mimalloc system"; fi
  for build in $order; do
    "$binaries/sharpdraft-$build" run "$experiment" --out "$runs/$build-$i" > "$runs/$build-$i.log" 2>&1 \
      || { cat "$runs/$build-$i.log" >&2; exit 1; }
    # Headline rows: | workload | context | drafter | method | requests | tau | speedup | decode | vs | tokens/s | ...
    # kept tab-separated: build, alternation, method, tau, speed-up, decode speed-up, tokens/s, peak MiB.
    awk -F'|' -v OFS='\t' -v build="$build" -v i="$i" '/^## Headline/ { on = 1; next } /^## / { on = 0 }
      on && /^\| / && $5 !~ /method|---/ {
        for (f = 2; f <= 17; f++) gsub(/^ +| +$/, "", $f)
        print build, i, $5, $7, $8, $9, $11, $17 }' "$runs/$build-$i/report.md" >> "$rows"
    # Where a cycle goes: | workload | context | drafter | method | cycles | draft ms | verify ms | target ms per token | ...
    awk -F'|' -v OFS='\t' -v build="$build" -v i="$i" '/^## Where a cycle goes/ { on = 1; next } /^## / { on = 0 }
      on && /^\| / && $5 !~ /method|---/ {
        for (f = 2; f <= 9; f++) gsub(/^ +| +$/, "", $f)
        print build, i, $5, $7, $8, $9 }' "$runs/$build-$i/report.md" >> "$costs"
  done
done

awk -F'\t' '{ printf "%-9s run %s  %-16s tau %-20s speed-up %-20s decode %-20s %s tokens/s, peak %s MiB\n", $1, $2, $3, $4, $5, $6, $7, $8 }' "$rows"
awk -F'\t' '{ printf "%-9s run %s  %-16s draft %s ms, verify %s ms a cycle; the target alone %s ms a token\n", $1, $2, $3, $4, $5, $6 }' "$costs"
echo "median decode speed-up over the alternations (each paired with the target alone in its own run):"
for build in system mimalloc; do
  # The decode column's median (its first number; an interval follows it with 2 requests or more).
  awk -F'\t' -v build="$build" '$1 == build && $3 != "ar" { split($6, d, " "); print $3, d[1] }' "$rows" |
    sort -k1,1 -k2,2g |
    awk -v build="$build" '{ values[$1] = values[$1] " " $2 }
      END { for (m in values) { n = split(substr(values[m], 2), v, " ");
        median = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2;
        printf "  %-9s %-16s %.2f (runs:%s)\n", build, m, median, values[m] } }'
done
