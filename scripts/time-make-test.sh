#!/usr/bin/env bash
# `make test` with its phases timed (run it on a fresh clone with an empty SHARPDRAFT_HOME to time a
# fresh machine; docs/setup.md gives the figures): libtorch's download and unpack, the build, the model
# fetch and the tests (make test's own steps, run one by one as the Makefile runs them).
set -uo pipefail
phase() { local name=$1; shift; local s=$(date +%s); "$@"; local rc=$?; echo "== $name: $(( $(date +%s) - s )) s (exit $rc)"; return $rc; }
phase "make deps (libtorch 2.11.0 and NVRTC from PyPI)" bash -c 'make --no-print-directory deps > /dev/null 2>&1' || exit 1
phase "build (cargo test --workspace --no-run)" bash -c 'cargo test --workspace --no-run 2>&1 | grep -E "^(error|warning: unused)|Finished"' || exit 1
phase "fetch smollm2-135m-instruct" target/debug/sharpdraft fetch smollm2-135m-instruct || exit 1
phase "tests (SHARPDRAFT_NO_SKIPS=1 cargo test --workspace)" bash -c 'set -o pipefail; SHARPDRAFT_NO_SKIPS=1 cargo test --workspace 2>&1 | grep -E "Running|test result|FAILED|panicked|^error|signal|Caused"' || exit 1
phase "make test-neon" bash -c 'make --no-print-directory test-neon 2>&1 | grep -E "test result|skipp|FAILED|^error|Finished"' || exit 1
