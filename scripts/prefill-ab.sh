#!/usr/bin/env bash
# What one prefill a request saves: the quickstart's 16 n0 unit run with every arm running the target's
# prefill itself (experiments/prefill-per-arm-16n0.yaml, as before) and with the prefill made once and
# handed to every arm (experiments/prefill-shared-16n0.yaml), alternately, ROUNDS times each (default 2;
# the order flips every round), each into a fresh folder. Prints each run's unit seconds (the unit's wall
# time, drafters' loading included) and whole command seconds, the ratio of the medians, and whether
# every arm's output of every request is the same token for token in every run.
#
#   scripts/prefill-ab.sh [ROUNDS]
#   scripts/record.sh prefill-ab-16n0 -- scripts/prefill-ab.sh 2     (what docs/measurement.md cites)
#
# $SHARPDRAFT names the binary (default: the test build's, target/debug/sharpdraft, which `make test`
# and `make run` build).
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
rounds=${1:-2}
case "$rounds" in ''|*[!0-9]*|0) echo "prefill-ab: ROUNDS '$rounds' must be a whole number, at least 1" >&2; exit 2 ;; esac
bin=${SHARPDRAFT:-target/debug/sharpdraft}
[ -x "$bin" ] || { echo "prefill-ab: no binary at $bin (cargo build -p sharpdraft, or set SHARPDRAFT)" >&2; exit 2; }
scratch=$(mktemp -d)
trap 'rm -rf -- "$scratch"' EXIT

declare -A unit_seconds
for ((round = 1; round <= rounds; round++)); do
  order="per-arm shared"
  if ((round % 2 == 0)); then order="shared per-arm"; fi
  for mode in $order; do
    out="$scratch/$mode-$round"
    started=$(date +%s.%N)
    "$bin" run "experiments/prefill-$mode-16n0.yaml" --out "$out" >"$out.stdout" 2>"$out.log" ||
      { cat "$out.log" >&2; exit 1; }
    ended=$(date +%s.%N)
    seconds=$(grep -o '"seconds":[0-9.e+-]*' "$out"/units/*.json | tail -n 1 | cut -d: -f2)
    unit_seconds[$mode]="${unit_seconds[$mode]:-} $seconds"
    printf 'round %d, %-8s unit %7.1f s, command %7.1f s\n' "$round" "$mode:" "$seconds" \
      "$(awk -v a="$started" -v b="$ended" 'BEGIN { print b - a }')"
    # Every arm's output of every request, in the unit's order (arms, then requests).
    grep -o '"output_ids":\[[^]]*\]' "$out"/units/*.json >"$out.ids"
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
before=$(echo "${unit_seconds[per-arm]}" | median)
after=$(echo "${unit_seconds[shared]}" | median)
printf 'median unit seconds: per-arm prefill %.1f, shared prefill %.1f; shared / per-arm %.2f\n' \
  "$before" "$after" "$(awk -v a="$after" -v b="$before" 'BEGIN { print a / b }')"
first="$scratch/per-arm-1.ids"
same=yes
for ids in "$scratch"/*.ids; do
  cmp -s "$first" "$ids" || same=no
done
echo "every output identical across the $((2 * rounds)) runs: $same"
[ "$same" = yes ]
