#!/usr/bin/env bash
# Installs mdBook, which `make docs` needs (and nothing else needs), from
# crates.io into ~/.cargo/bin. Idempotent and quiet when it is already there.
set -euo pipefail

# The 0.4 series: the book's layout (book.toml, src/SUMMARY.md) is 0.4's.
MDBOOK_VERSION=0.4.52

export PATH="$HOME/.cargo/bin:$PATH"
if command -v mdbook >/dev/null && [ "$(mdbook --version)" = "mdbook v$MDBOOK_VERSION" ]; then
    exit 0
fi
echo "docs-deps: installing mdbook $MDBOOK_VERSION (cargo install, a few minutes)"
cargo install mdbook --locked --version "$MDBOOK_VERSION" --quiet
