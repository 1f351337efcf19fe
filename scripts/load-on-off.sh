#!/usr/bin/env bash
# Background CPU load that comes and goes, for checking that paired timing holds under a noisy
# neighbour (docs: "How speed-ups are measured"). Busy processes on every core for a while, then none,
# in periods drawn between MIN and MAX seconds, until DURATION seconds have passed; stops by itself and
# takes its busy processes with it when killed.
#   scripts/load-on-off.sh DURATION [MIN MAX] [SEED]
#   scripts/load-on-off.sh 900 3 60 & sharpdraft run experiments/paired-timing-check.yaml --out runs/x
set -euo pipefail
duration=${1:?usage: load-on-off.sh DURATION [MIN MAX] [SEED]}
min=${2:-3}
max=${3:-60}
RANDOM=${4:-7}
cores=$(nproc)
busy=()
stop_busy() { for pid in "${busy[@]:-}"; do [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; done; busy=(); }
trap 'stop_busy; exit 0' INT TERM EXIT
end=$((SECONDS + duration))
on=1
while [ "$SECONDS" -lt "$end" ]; do
  period=$((min + RANDOM % (max - min + 1)))
  if [ "$on" -eq 1 ]; then
    for _ in $(seq "$cores"); do (while :; do :; done) & busy+=($!); done
    echo "$(date +%T) load on for ${period} s" >&2
  else
    echo "$(date +%T) load off for ${period} s" >&2
  fi
  sleep "$period"
  stop_busy
  on=$((1 - on))
done
