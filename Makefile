# Makefile — developer entry points for tg-ws-proxy. Owns: the commands CI and people run
# (test, lint, demo, bench, size, cross builds, dist). Must not touch: source or test files; cross
# toolchain details live in cross/build.sh so they can be run without make.
#
# GNU make. Recipes are indented with tabs.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo
BIN := tg-ws-proxy
# Cargo.lock is committed: builds must use exactly it.
LOCKED := $(if $(wildcard Cargo.lock),--locked,)
# Seconds per fuzz target for `make fuzz` (FUZZ_RUNS=N runs N executions each instead).
FUZZ_SECS ?= 60
# Extra arguments for the bench driver, e.g. make bench BENCH_ARGS="--large 200 --gib 0.5"
BENCH_ARGS ?=
# The MIPS pair CI builds; `cross-all` adds the tier-2 targets.
CROSS_CI_TARGETS := mips-unknown-linux-musl mipsel-unknown-linux-musl
CROSS_ALL_TARGETS := $(CROSS_CI_TARGETS) armv7-unknown-linux-musleabihf arm-unknown-linux-musleabi \
	aarch64-unknown-linux-musl x86_64-unknown-linux-musl
# `make dist` targets (all six by default); e.g. make dist DIST_TARGETS="mips-unknown-linux-musl"
DIST_TARGETS ?= $(CROSS_ALL_TARGETS)

.PHONY: help check-tools test lint demo bench bench-burst bench-direct bench-returned bench-pit bench-freeze bench-soak fuzz fuzz-seeds size cross-install cross-test cross-all cross-tiny \
	cross-bench

help:
	@echo "tg-ws-proxy make targets:"
	@echo "  make test           check-tools, then cargo test --all-targets $(LOCKED)  (what CI runs on the host)"
	@echo "  make check-tools    .ci/check-tools: the test tools are there, or the one apt-get line (seconds)"
	@echo "  make lint           cargo fmt --all --check; cargo clippy --all-targets -- -D warnings  (CI, before the tests)"
	@echo "  make demo           release build, then examples/demo.rs: fake DC + real proxy + probes"
	@echo "  make bench          run bench/run.sh \$$BENCH_ARGS (report in target/bench/)"
	@echo "  make bench-burst    only the burst of new sessions, with its --handshake-pace 0 reference (\$$BENCH_ARGS appended)"
	@echo "  make bench-direct   only issue 21's cheap relay end to end (reencrypt / passthrough / plain, tcp and ws; \$$BENCH_ARGS appended)"
	@echo "  make bench-returned only the memory-returned bursts (600 masked, 600 relayed; glibc and musl), ~6 min"
	@echo "  make bench-pit      run bench/pit.sh: the pit / flapping / Worker-requests A/B (report in target/bench/)"
	@echo "  make bench-freeze   run bench/freeze.sh: the 16 KB freeze, both forms x three client behaviours (OLD=BIN adds a baseline)"
	@echo "  make bench-soak     run bench/soak.sh \$$BENCH_ARGS: 1,000 held + 20 new sessions/s for 30 min, fds/RSS slope"
	@echo "  make fuzz           every fuzz target for FUZZ_SECS=$(FUZZ_SECS) s each (fuzz/run.sh; needs cargo-fuzz); fails on any crash"
	@echo "  make fuzz-seeds     regenerate the committed seed corpus fuzz/corpus/ (fuzz/examples/seeds.rs)"
	@echo "  make size           x86_64 stripped release binary size in bytes"
	@echo "  make cross-install  install the cross toolchain (Debian rustc-web, zig, qemu; root)"
	@echo "  make cross-test     MIPS + MIPSel static musl builds, qemu smoke, unit tests on MIPS BE"
	@echo "  make cross-all      static musl builds + qemu smoke for all six router targets"
	@echo "  make cross-tiny     opt-in size build (panic=immediate-abort) for MIPS + MIPSel"
	@echo "  make cross-bench    MIPS under qemu: proxy CPU/GiB vs the opt-3 crypto floor, ws AES-GCM vs ChaCha20"
	@echo "  make dist           router packages in dist/: binary, .ipk, .tar.gz per DIST_TARGETS, SHA256SUMS"
	@echo "Cross builds go to \$$CROSS_TARGET_DIR (default /var/tmp/tg-ws-proxy-cross); see cross/README.md."

# The tools the black-box tests run are checked first, so a missing package is named within
# seconds instead of failing one test after the whole suite compiled.
check-tools:
	.ci/check-tools

test: check-tools
	$(CARGO) test --all-targets $(LOCKED)

# What CI checks before the tests: rustfmt's layout and clippy with every warning an error.
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --all-targets $(LOCKED) -- -D warnings

demo:
	$(CARGO) build --release $(LOCKED)
	$(CARGO) run --release $(LOCKED) --example demo -- target/release/$(BIN)

bench:
	@if [ -f bench/run.sh ]; then \
		sh bench/run.sh $(BENCH_ARGS); \
	else \
		echo "make bench: bench/run.sh does not exist yet (benchmarks are not written)" >&2; \
		exit 1; \
	fi

bench-burst:
	sh bench/run.sh --only burst --burst-ref $(BENCH_ARGS)

bench-direct:
	BENCH_MUSL=0 sh bench/run.sh --only direct $(BENCH_ARGS)

bench-returned:
	sh bench/run.sh --only returned $(BENCH_ARGS)

bench-pit:
	bash bench/pit.sh

bench-freeze:
	sh bench/freeze.sh $(BENCH_ARGS)

bench-soak:
	sh bench/soak.sh $(BENCH_ARGS)

fuzz:
	FUZZ_SECS=$(FUZZ_SECS) fuzz/run.sh

fuzz-seeds:
	fuzz/run.sh seeds

size:
	$(CARGO) build --release $(LOCKED)
	@b=target/release/$(BIN); \
	printf '%s: %s bytes (x86_64 host target, stripped by the release profile)\n' \
		"$$b" "$$(stat -c %s "$$b")"; \
	echo "The static musl size (its budget: docs/design.md §8) comes from:" \
		"cross/build.sh build x86_64-unknown-linux-musl"

cross-install:
	cross/build.sh install

cross-test:
	cross/build.sh ci

cross-all:
	cross/build.sh build $(CROSS_ALL_TARGETS)
	cross/build.sh smoke $(CROSS_ALL_TARGETS)

cross-tiny:
	cross/build.sh tiny $(CROSS_CI_TARGETS)

# CROSS_BENCH_MIB / CROSS_BENCH_GIB (environment) size the runs; see cross/bench.sh.
cross-bench:
	cross/build.sh bench mips-unknown-linux-musl

# Builds (cross/build.sh) and packages each of DIST_TARGETS into dist/; see cross/README.md.
.PHONY: dist
dist:
	cross/dist.sh all $(DIST_TARGETS)
