#!/usr/bin/env bash
# `generate --compare-ar` on one prompt twice: on a quiet machine, then beside a busy loop at the lowest
# priority (nice 19) on every core. The alternated rounds and the load check are to keep the two
# speed-ups within each other's printed range. Run through scripts/record.sh to keep what it printed:
#   scripts/record.sh compare-ar-busy -- scripts/compare-ar-busy.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
rounds=${1:-3}
sharpdraft=${CARGO_TARGET_DIR:-target}/debug/sharpdraft
[ -x "$sharpdraft" ] || cargo build -q -p sharpdraft
decode() {
  "$sharpdraft" generate --target smollm2-135m-instruct --drafter smollm2-135m-dflash-v4k-long \
    --kind dflash --prompt "What is 15% of 240? Show your steps." --max-new-tokens 200 \
    --compare-ar --rounds "$rounds" >/dev/null
}
echo "== quiet machine"
decode
echo "== beside a busy loop on every core at nice 19"
loops=()
for _ in $(seq "$(nproc)"); do
  nice -n 19 sh -c 'while :; do :; done' &
  loops+=($!)
done
trap 'kill "${loops[@]}" 2>/dev/null || true' EXIT
sleep 1
decode
