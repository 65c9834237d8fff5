#!/bin/sh
# Builds Katran's XDP balancer (katran/lib/bpf/balancer.bpf.c) from a Katran
# source tree, for `weir-lab bench katran`, with Katran's own recipe
# (katran/lib/Makefile-bpf): the C front end for the host, so that glibc's
# headers resolve, then llc for the BPF target; no compile-time options
# beyond Katran's defaults.
#
#   lab/scripts/katran-build.sh SOURCE [OUT_DIR]
#
# SOURCE is a checkout of https://github.com/facebookincubator/katran.
# OUT_DIR defaults to target/katran of this repository. Prints the path of
# the object it wrote. Needs clang and llc (Debian: clang, llvm).
set -eu

usage() {
	echo "usage: $0 SOURCE [OUT_DIR]   (SOURCE: a Katran checkout)" >&2
	exit 2
}

[ $# -ge 1 ] && [ $# -le 2 ] || usage
src=$1
main="$src/katran/lib/bpf/balancer.bpf.c"
if [ ! -f "$main" ]; then
	echo "$0: $main not found: SOURCE must be a Katran checkout" \
		"(git clone https://github.com/facebookincubator/katran)" >&2
	exit 1
fi
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${2:-$repo/target/katran}
clang_bin=${CLANG:-clang}
llc_bin=${LLC:-llc}
for tool in "$clang_bin" "$llc_bin"; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "$0: $tool not found: install clang and llvm (or set CLANG / LLC)" >&2
		exit 1
	fi
done
mkdir -p "$out"
obj="$out/balancer.bpf.o"
# -I$src: Katran includes its headers as "katran/lib/...";
# linux_includes: its bpf.h and bpf_helpers.h; the multiarch directory:
# <asm/types.h> under the kernel's uapi headers. No unwind tables: the
# host front end would add an .eh_frame section that libbpf skips with a
# warning; the program's code is the same without it.
"$clang_bin" \
	-I"$src" -I"$src/katran/lib/linux_includes" \
	-I"/usr/include/$(uname -m)-linux-gnu" \
	-D__KERNEL__ -Wno-unused-value -Wno-pointer-sign \
	-Wno-compare-distinct-pointer-types -fno-asynchronous-unwind-tables \
	-O2 -g -emit-llvm -c "$main" -o "$out/balancer.bc"
"$llc_bin" -march=bpf -filetype=obj -o "$obj" "$out/balancer.bc"
echo "$obj"
