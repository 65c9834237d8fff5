# weir: `make demo` and `make test` are all a new user types (as root, on
# Debian 12); both install what they need first.

SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
WEIR := target/release/weir
# The labs, benchmarks and simulator (lab/): never installed.
WEIR_LAB := target/release/weir-lab

.PHONY: deps build demo test lint bench docs man install clean

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

# The book (docs/, mdBook) as HTML in target/book. mdBook comes from
# crates.io (scripts/docs-deps.sh), so only this target pays for it.
docs:
	@scripts/docs-deps.sh
	@mkdir -p target
	mdbook build docs 2>&1 | tee target/mdbook.log
	@! grep -E '\b(WARN|ERROR)\b' target/mdbook.log

# weir(8) from docs/man/weir.8.md and weir.toml(5) from the book's
# configuration chapter, as roff in target/man (go-md2man, from scripts/deps.sh).
man:
	scripts/man.sh target/man

# For operators: the binary (stripped; no lab, benchmark or simulator: those
# are weir-lab's, never installed), systemd units, man pages (weir(8),
# weir.toml(5), and one page per command generated from the CLI definition),
# shell completions (also generated), example configurations and the Grafana
# dashboard. clap's weir.1 is left out: `man weir` looks in section 1 before 8,
# and weir(8) is the overview. `make install PREFIX=/usr DESTDIR=pkgroot` stages
# a package; the units then run $(PREFIX)/bin/weir. Installs no configuration:
# copy one from $(DOCDIR)/examples to $(SYSCONFDIR)/weir/weir.toml (kv.toml).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
DOCDIR ?= $(DATADIR)/doc/weir
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= /etc

install: man
	$(CARGO) build --release -p weir
	install -Dm755 -s $(WEIR) $(DESTDIR)$(BINDIR)/weir
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 \
		$(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(SYSCONFDIR)/weir \
		$(DESTDIR)$(DATADIR)/bash-completion/completions $(DESTDIR)$(DATADIR)/zsh/site-functions \
		$(DESTDIR)$(DATADIR)/fish/vendor_completions.d
	for u in packaging/systemd/*.service; do \
		sed 's|/usr/local/bin/weir|$(BINDIR)/weir|g' $$u > $(DESTDIR)$(UNITDIR)/$${u##*/} || exit 1; \
		chmod 644 $(DESTDIR)$(UNITDIR)/$${u##*/}; \
	done
	$(WEIR) man $(DESTDIR)$(MANDIR)/man1
	rm -f $(DESTDIR)$(MANDIR)/man1/weir.1
	install -m644 target/man/weir.8 $(DESTDIR)$(MANDIR)/man8/weir.8
	install -m644 target/man/weir.toml.5 $(DESTDIR)$(MANDIR)/man5/weir.toml.5
	$(WEIR) completions bash > $(DESTDIR)$(DATADIR)/bash-completion/completions/weir
	$(WEIR) completions zsh > $(DESTDIR)$(DATADIR)/zsh/site-functions/_weir
	$(WEIR) completions fish > $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/weir.fish
	install -Dm644 -t $(DESTDIR)$(DOCDIR)/examples examples/*.toml
	install -Dm644 packaging/grafana/weir.json $(DESTDIR)$(DATADIR)/weir/grafana/weir.json

clean:
	$(CARGO) clean
