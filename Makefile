# weir: `make demo` and `make test` are all a new user types (as root, on
# Debian 12); both install what they need first.

SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
# The binary that `make install` and `make deb` ship: the release build, or a
# prebuilt one given as WEIR=path/to/weir (then no Rust toolchain is needed).
RELEASE_WEIR := target/release/weir
WEIR ?= $(RELEASE_WEIR)
# The labs, benchmarks and simulator (lab/): never installed.
WEIR_LAB := target/release/weir-lab

.PHONY: deps build demo test lint bench docs man install shipped-binary deb clean

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

# The release binary, rebuilt only when a product source is newer than it:
# `make install` after `make build` (or after unpacking a tree with a built
# binary) runs no cargo at all.
PRODUCT_SOURCES := $(shell find crates bpf -name tests -prune -o -type f -print) Cargo.toml Cargo.lock
$(RELEASE_WEIR): $(PRODUCT_SOURCES)
	@scripts/deps.sh
	$(CARGO) build --release -p weir

shipped-binary: $(filter $(RELEASE_WEIR),$(WEIR))
	@test -f "$(WEIR)" -a -x "$(WEIR)" || { echo "WEIR=$(WEIR) is not an executable file; run make build, or give the path of a built weir as WEIR=path/to/weir" >&2; exit 1; }

# For operators: the binary (stripped; no lab, benchmark or simulator: those
# are weir-lab's, never installed), systemd units, man pages (weir(8),
# weir.toml(5), and one page per command generated from the CLI definition),
# shell completions (also generated), example configurations, the Grafana
# dashboard and the Prometheus alert rules. clap's weir.1 is left out: `man weir` looks in section 1 before 8,
# and weir(8) is the overview. `make install PREFIX=/usr DESTDIR=pkgroot` stages
# a package; the units then run $(PREFIX)/bin/weir. Installs no configuration:
# copy one from $(DOCDIR)/examples to $(SYSCONFDIR)/weir/weir.toml (kv.toml).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
DOCDIR ?= $(DATADIR)/doc/weir
UNITDIR ?= $(PREFIX)/lib/systemd/system
BASHCOMPDIR ?= $(DATADIR)/bash-completion/completions
ZSHCOMPDIR ?= $(DATADIR)/zsh/site-functions
FISHCOMPDIR ?= $(DATADIR)/fish/vendor_completions.d
SYSCONFDIR ?= /etc

install: man shipped-binary
	install -Dm755 -s $(WEIR) $(DESTDIR)$(BINDIR)/weir
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 \
		$(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(SYSCONFDIR)/weir \
		$(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	for u in packaging/systemd/*.service; do \
		sed 's|/usr/local/bin/weir|$(BINDIR)/weir|g' $$u > $(DESTDIR)$(UNITDIR)/$${u##*/} || exit 1; \
		chmod 644 $(DESTDIR)$(UNITDIR)/$${u##*/}; \
	done
	$(WEIR) man $(DESTDIR)$(MANDIR)/man1
	rm -f $(DESTDIR)$(MANDIR)/man1/weir.1
	install -m644 target/man/weir.8 $(DESTDIR)$(MANDIR)/man8/weir.8
	install -m644 target/man/weir.toml.5 $(DESTDIR)$(MANDIR)/man5/weir.toml.5
	$(WEIR) completions bash > $(DESTDIR)$(BASHCOMPDIR)/weir
	$(WEIR) completions zsh > $(DESTDIR)$(ZSHCOMPDIR)/_weir
	$(WEIR) completions fish > $(DESTDIR)$(FISHCOMPDIR)/weir.fish
	install -Dm644 -t $(DESTDIR)$(DOCDIR)/examples examples/*.toml
	install -Dm644 packaging/grafana/weir.json $(DESTDIR)$(DATADIR)/weir/grafana/weir.json
	install -Dm644 packaging/prometheus/weir-alerts.yml $(DESTDIR)$(DATADIR)/weir/prometheus/weir-alerts.yml

# A Debian 12 package of what `make install` ships, built with dpkg-deb:
# $(DEB_DIR)/weir_VERSION_ARCH.deb. See scripts/deb.sh and packaging/debian/.
DEB_DIR ?= target
deb: shipped-binary
	scripts/deb.sh "$(WEIR)" "$(DEB_DIR)"

clean:
	$(CARGO) clean
