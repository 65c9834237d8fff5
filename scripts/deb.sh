#!/usr/bin/env bash
# Usage: scripts/deb.sh WEIR OUTDIR
# Builds OUTDIR/weir_VERSION_ARCH.deb, a Debian 12 (bookworm) package of the
# weir binary WEIR and everything `make install` ships with it. The tree is
# staged by `make install PREFIX=/usr DESTDIR=...` (one list of what is
# installed where, for both), then given what Debian policy asks of a
# package: compressed man pages and changelog, a copyright file, md5sums,
# files owned by root, and a control file whose Depends come from the
# libraries the binary links (dpkg-shlibdeps). packaging/debian/ holds the
# control template, the changelog, the copyright file and the maintainer
# scripts. Needs dpkg-dev and go-md2man (scripts/deps.sh), not cargo.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: scripts/deb.sh WEIR OUTDIR (the weir binary to package, where to write the .deb)" >&2
    exit 2
fi
weir=$(realpath -e -- "$1" 2>/dev/null) || {
    echo "deb: $1 does not exist; build weir first (make build) or name a built binary" >&2
    exit 1
}
mkdir -p -- "$2"
out=$(realpath -- "$2")
cd "$(dirname "$0")/.."
for tool in dpkg-deb dpkg-shlibdeps go-md2man; do
    command -v "$tool" >/dev/null || {
        echo "deb: $tool is missing; run scripts/deps.sh (as root)" >&2
        exit 1
    }
done

# The version: crates/weir/Cargo.toml's, or the workspace's when the crate
# inherits it. A Cargo pre-release (1.2.0-rc.1) sorts before its release in
# Debian only as 1.2.0~rc.1.
toml_version() { # FILE SECTION
    awk -F'"' -v want="[$2]" '/^\[/ { section = $0 } section == want && /^version *=/ { print $2; exit }' "$1"
}
cargo_version=$(toml_version crates/weir/Cargo.toml package)
[ -n "$cargo_version" ] || cargo_version=$(toml_version Cargo.toml workspace.package)
if [ -z "$cargo_version" ]; then
    echo "deb: no version in crates/weir/Cargo.toml nor in Cargo.toml's [workspace.package]" >&2
    exit 1
fi
version=${cargo_version/-/\~}
binary_version=$("$weir" --version) || {
    echo "deb: $weir --version failed; is it a weir binary for this machine?" >&2
    exit 1
}
if [ "$binary_version" != "weir $cargo_version" ]; then
    echo "deb: $weir says '$binary_version' but the sources are weir $cargo_version; rebuild it (make build)" >&2
    exit 1
fi
changelog_version=$(sed -n '1s/^weir (\([^)]*\)).*/\1/p' packaging/debian/changelog)
if [ "$changelog_version" != "$version" ]; then
    echo "deb: packaging/debian/changelog's first entry is for '$changelog_version', not $version; add an entry for $version at its top" >&2
    exit 1
fi
# The changelog's first entry names the maintainer and dates the files.
maintainer=$(sed -n 's/^ -- \(.*>\)  .*/\1/p' packaging/debian/changelog | head -1)
released=$(sed -n 's/^ -- .*>  //p' packaging/debian/changelog | head -1)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(date -d "$released" +%s)}
arch=$(dpkg --print-architecture)

stage=$(mktemp -d "${TMPDIR:-/tmp}/weir-deb.XXXXXX")
trap 'rm -rf -- "$stage"' EXIT
# dpkg-shlibdeps looks for debian/control, and for the binaries under
# debian/PACKAGE, from its working directory.
root=$stage/debian/weir
# bookworm's units live in /lib/systemd/system (debhelper puts them there);
# Debian's zsh reads vendor-completions, not site-functions.
make --no-print-directory install WEIR="$weir" DESTDIR="$root" PREFIX=/usr \
    UNITDIR=/lib/systemd/system ZSHCOMPDIR=/usr/share/zsh/vendor-completions >"$stage/install.log" || {
    cat "$stage/install.log" >&2
    echo "deb: make install into the staging tree failed (above)" >&2
    exit 1
}

# What `install -s` leaves and Debian drops too (as dh_strip does).
strip --remove-section=.comment --remove-section=.note "$root/usr/bin/weir"
find "$root/usr/share/man" -type f -exec gzip -9n {} +
install -Dm644 packaging/debian/copyright "$root/usr/share/doc/weir/copyright"
gzip -9n <packaging/debian/changelog >"$root/usr/share/doc/weir/changelog.gz"

# Depends: the packages of the shared libraries the binary loads (libc,
# libelf, zlib; libbpf and libxdp are linked in), from dpkg-shlibdeps, which
# finds the package's root by its DEBIAN directory.
install -d "$root/DEBIAN"
printf 'Source: weir\n\nPackage: weir\nArchitecture: any\n' >"$stage/debian/control"
depends=$(cd "$stage" && dpkg-shlibdeps -O -edebian/weir/usr/bin/weir | sed -n 's/^shlibs:Depends=//p')
if [ -z "$depends" ]; then
    echo "deb: dpkg-shlibdeps found no library dependencies of $weir; is it dynamically linked?" >&2
    exit 1
fi

install -m755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$root/DEBIAN/"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) \
    >"$root/DEBIAN/md5sums"
installed_kib=$(du -sk --apparent-size --exclude=DEBIAN "$root" | cut -f1)
sed -e "s|\${Version}|$version|" -e "s|\${Architecture}|$arch|" -e "s|\${Maintainer}|$maintainer|" \
    -e "s|\${Installed-Size}|$installed_kib|" -e "s|\${shlibs:Depends}|$depends|" \
    -e '/^#/d' packaging/debian/control >"$root/DEBIAN/control"
if grep -q '\${' "$root/DEBIAN/control"; then
    echo "deb: packaging/debian/control has a field this script does not fill: $(grep '\${' "$root/DEBIAN/control")" >&2
    exit 1
fi
chmod 644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
find "$root" -type d -exec chmod 755 {} +
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

deb=$out/weir_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
