# weir: `make demo` and `make test` are all a new user types (as root, on
# Debian 12); both install what they need first.

SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
WEIR := target/release/weir
# The labs, benchmarks and simulator (lab/): never installed.
WEIR_LAB := target/release/weir-lab

.PHONY: deps build demo test lint bench install clean

deps:
	@scripts/deps.sh

build: deps
	$(CARGO) build --release --workspace --all-targets

demo: build
	$(WEIR_LAB) demo

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
	$(WEIR_LAB) bench xdp --json out/bench-xdp.json
	$(WEIR_LAB) bench sim --json out/bench-sim.json

# For operators: the binary, systemd units, man pages and shell completions
# (both generated from the CLI definition), example configurations and the
# Grafana dashboard. The binary is installed stripped (install -s) and holds
# no lab, benchmark or simulator (those are weir-lab's, never installed).
# `make install PREFIX=/usr DESTDIR=pkgroot` stages a package; the units then
# run $(PREFIX)/bin/weir. Installs no configuration: copy one from
# $(DOCDIR)/examples to $(SYSCONFDIR)/weir/weir.toml (kv.toml).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
DOCDIR ?= $(DATADIR)/doc/weir
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= /etc

install:
	$(CARGO) build --release -p weir
	install -Dm755 -s $(WEIR) $(DESTDIR)$(BINDIR)/weir
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(SYSCONFDIR)/weir \
		$(DESTDIR)$(DATADIR)/bash-completion/completions $(DESTDIR)$(DATADIR)/zsh/site-functions \
		$(DESTDIR)$(DATADIR)/fish/vendor_completions.d
	for u in packaging/systemd/*.service; do \
		sed 's|/usr/local/bin/weir|$(BINDIR)/weir|g' $$u > $(DESTDIR)$(UNITDIR)/$${u##*/} || exit 1; \
		chmod 644 $(DESTDIR)$(UNITDIR)/$${u##*/}; \
	done
	$(WEIR) man $(DESTDIR)$(MANDIR)/man1
	$(WEIR) completions bash > $(DESTDIR)$(DATADIR)/bash-completion/completions/weir
	$(WEIR) completions zsh > $(DESTDIR)$(DATADIR)/zsh/site-functions/_weir
	$(WEIR) completions fish > $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/weir.fish
	install -Dm644 -t $(DESTDIR)$(DOCDIR)/examples examples/*.toml
	install -Dm644 packaging/grafana/weir.json $(DESTDIR)$(DATADIR)/weir/grafana/weir.json

clean:
	$(CARGO) clean
