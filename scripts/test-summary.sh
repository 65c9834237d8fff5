#!/usr/bin/env bash
# Adds up cargo's "test result:" lines of a test log into one closing line.
set -euo pipefail
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }' "$1"
