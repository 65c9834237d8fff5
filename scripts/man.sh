#!/usr/bin/env bash
# Writes the man pages into OUTDIR (default target/man):
#   weir.8       from docs/man/weir.8.md;
#   weir.toml.5  from the book's configuration chapter, docs/src/configuration.md,
#                so the reference and the man page cannot drift apart.
# go-md2man (Debian package go-md2man, installed by scripts/deps.sh) turns
# markdown into roff; the steps below only adapt the chapter to a man page.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/man}
if ! command -v go-md2man >/dev/null; then
    echo "man: go-md2man is missing; run scripts/deps.sh (or apt-get install go-md2man)" >&2
    exit 1
fi
mkdir -p "$out"

go-md2man -in docs/man/weir.8.md -out "$out/weir.8"

# The chapter as a man page: a title block and NAME/SYNOPSIS in front, the
# chapter's own title dropped, its sections made top-level, links reduced
# to their text, and tables (which roff cannot wrap) turned into lists.
{
    cat <<'HEAD'
% WEIR.TOML 5 "" "weir" "File Formats"

# NAME
weir.toml - configuration file of weir serve

# SYNOPSIS
*/etc/weir/weir.toml*, or any file given to **weir serve --config** and **weir check --config**

# DESCRIPTION
HEAD
    perl -ne '
        BEGIN { @head = (); }
        next if $. == 1 && /^# /;
        s/\[([^\]]+)\]\([^)]*\)/$1/g;
        if (/^\|/) {
            chomp; s/^\|\s*//; s/\s*\|\s*$//; my @c = split /\s*\|\s*/;
            if (!@head) { @head = @c; print "\n"; next; }
            next if $c[0] =~ /^-+$/;
            my $line = "- $c[0]";
            for my $i (1 .. $#c) {
                next if $c[$i] eq "";
                if ($head[$i] eq "default") { $line .= " (default $c[$i])"; }
                elsif ($i == $#c) { $line .= ": $c[$i]"; }
                else { $line .= "; $head[$i] $c[$i]"; }
            }
            print "$line\n"; next;
        }
        @head = ();
        s/^## /# /;
        s/^### /## /;
        print;
    ' docs/src/configuration.md
    cat <<'TAIL'

# SEE ALSO
**weir**(8); the example configurations in the installed documentation's *examples/*.
TAIL
} > "$out/weir.toml.5.md"
go-md2man -in "$out/weir.toml.5.md" -out "$out/weir.toml.5"
