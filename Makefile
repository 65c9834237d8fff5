# weir: `make demo` and `make test` are all a new user types (as root, on
# Debian 12); both install what they need first.

SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
WEIR := target/release/weir

.PHONY: deps build demo test lint bench clean

deps:
	@scripts/deps.sh

build: deps
	$(CARGO) build --release --workspace --all-targets

demo: build
	$(WEIR) lab demo

# Unit, BPF (BPF_PROG_TEST_RUN), fuzz and end-to-end (network namespace)
# suites, plus formatting and lints. Needs root.
test: build lint
	@mkdir -p out
	set -o pipefail; $(CARGO) test --release --workspace 2>&1 | tee out/test.log
	@scripts/test-summary.sh out/test.log

lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

bench: build
	@mkdir -p out
	$(WEIR) bench xdp --json out/bench-xdp.json
	$(WEIR) bench sim --json out/bench-sim.json

clean:
	$(CARGO) clean
