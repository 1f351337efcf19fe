#!/usr/bin/env bash
# Attention's two products (crates/kernel/benches/attention.rs) at another revision and at this tree, in
# the dev profile (what `make run` and the tests build) and the release profile (`cargo bench`'s), the
# builds taking turns round after round, so that the machine's drift falls on all of them alike:
#
#   scripts/kernel-ab.sh REVISION [ROUNDS]    (default 4 rounds; each build times 5 of its own a round)
#
# Builds REVISION's kernel in a detached worktree under target/kernel-ab/ (the kernel crate has no
# libtorch, so that is quick), copies every bench binary to target/kernel-ab/bench/attention-<name>-<profile>
# (name: REVISION as given, `/`, `~` and `^` made `-`; `tree` for this tree, uncommitted changes
# included), then prints each
# round's table as the bench printed it and, last, the median of each product, row count and build over
# the rounds (microseconds for one key head over 4096 keys). Record it with scripts/record.sh.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."

[ $# -ge 1 ] || { echo "usage: scripts/kernel-ab.sh REVISION [ROUNDS]" >&2; exit 2; }
revision=$1
rounds=${2:-4}
case "$rounds" in ''|*[!0-9]*) rounds_ok=0 ;; *) rounds_ok=$((10#$rounds >= 1)) ;; esac
[ "$rounds_ok" = 1 ] || { echo "kernel-ab: ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2; }
case "$revision" in ''|-*|tree|*[!A-Za-z0-9._/~^-]*) echo "kernel-ab: REVISION '$revision' is not a revision name" >&2; exit 2 ;; esac
commit=$(git rev-parse --verify -q "$revision^{commit}") || { echo "kernel-ab: no commit '$revision' in this repository" >&2; exit 2; }

ab=target/kernel-ab
# The binaries' name for the revision: as given, with what a file name cannot hold replaced.
name=$(printf '%s' "$revision" | tr '/~^' '-')
mkdir -p "$ab/bench"

# Builds the attention bench of the workspace at $1 in both profiles and copies it as attention-$2-<profile>.
build() {
  local root=$1 label=$2 target=$3 profile built
  for profile in dev release; do
    # The bench executable this build made, as cargo reports it (not the newest file in a shared folder).
    built=$(cd "$root" && CARGO_TARGET_DIR=$target cargo bench -q --no-run --profile "$profile" \
      -p sharpdraft-kernel --bench attention --message-format=json \
      | grep -o '"executable":"[^"]*"' | tail -n 1 | sed 's/^"executable":"//; s/"$//')
    [ -x "$built" ] || { echo "kernel-ab: cargo named no bench executable for $root ($profile)" >&2; exit 1; }
    cp "$built" "$ab/bench/attention-$label-$profile"
  done
}

# One worktree per commit, kept for the next run (a folder `cargo clean` removed is forgotten first).
worktree=$ab/worktree-${commit:0:12}
git worktree prune
if [ ! -d "$worktree" ]; then
  git worktree add -q --detach "$worktree" "$commit"
fi
# The worktree's own target folder: the tree's build keeps its own.
build "$worktree" "$name" "$PWD/$ab/target-$name"
build . tree "${CARGO_TARGET_DIR:-$PWD/target}"

builds="$name-dev tree-dev $name-release tree-release"
medians=$(mktemp)
trap 'rm -f "$medians"' EXIT
echo "revision $revision ($commit) against this tree; $rounds rounds; each a table of medians over 5 runs of each product"
for i in $(seq 1 "$rounds"); do
  for build in $builds; do
    echo "== $build, round $i"
    # | form | product | rows | us | us per row | per row vs 16 rows |
    table=$("$ab/bench/attention-$build" 5 | grep '^| ' | grep -v '^| form\|^|---')
    echo "$table"
    echo "$table" | awk -F'|' -v OFS='\t' -v build="$build" \
      '{ for (f = 2; f <= 5; f++) gsub(/^ +| +$/, "", $f); print $2, $3, $4, build, $5 }' >> "$medians"
  done
done
echo
echo "median us over the $rounds rounds (one key head, 4096 keys of width 64, one thread)"
echo "| form | product | rows | $(echo "$builds" | sed 's/ / | /g') |"
echo "|---|---|---|$(for _ in $builds; do printf -- '---|'; done)"
sort -t $'\t' -k1,1 -k2,2 -k3,3n "$medians" | awk -F'\t' -v builds="$builds" '
  function median(list,   n, v, i, j, t) {
    n = split(list, v, " ")
    if (n == 0) return "-"
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    return n % 2 ? v[(n + 1) / 2] : sprintf("%.1f", (v[n / 2] + v[n / 2 + 1]) / 2)
  }
  { key = $1 "|" $2 "|" $3; if (!(key in seen)) { seen[key] = 1; order[++keys] = key } times[key, $4] = times[key, $4] " " $5 }
  END {
    count = split(builds, b, " ")
    for (k = 1; k <= keys; k++) {
      split(order[k], part, "|")
      line = "| " part[1] " | " part[2] " | " part[3] " |"
      for (i = 1; i <= count; i++) line = line " " median(times[order[k], b[i]]) " |"
      print line
    }
  }'
