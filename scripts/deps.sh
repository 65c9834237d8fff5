#!/usr/bin/env bash
# Installs what building, testing and the labs need, on Debian 12 as root.
# Idempotent and quiet when everything is already there. dpkg-dev,
# debootstrap and lintian build the Debian package and test it (lintian, and
# an install in a clean Debian 12 root).
set -euo pipefail

PACKAGES=(clang llvm m4 libclang-dev libelf-dev zlib1g-dev pkg-config make iproute2 bpftool ethtool procps linux-libc-dev memcached nutcracker libmemcached-tools systemd man-db etcd-server etcd-client chromium nftables iperf3 haproxy go-md2man dpkg-dev debootstrap lintian)
PACKAGES+=(frr bird2)  # the BGP speaker weir drives ([bgp]) and the router of the BGP e2e test and lab
PACKAGES+=(prometheus)  # promtool, which checks packaging/prometheus/weir-alerts.yml
PACKAGES+=(ngtcp2-client)  # a second QUIC stack's HTTP/3 client (gtlsclient) in the QUIC e2e test
# The Rust toolchain the workspace needs (rust-version in Cargo.toml).
MIN_RUST=1.85

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" != 0 ]; then
        echo "deps: missing packages ${missing[*]}; run as root (apt-get needs it)" >&2
        exit 1
    fi
    echo "deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null; then
    echo "deps: installing Rust from Debian (cargo)"
    apt-get install -y -qq cargo >/dev/null
fi
have=$(rustc --version | awk '{print $2}')
if [ "$(printf '%s\n%s\n' "$MIN_RUST" "$have" | sort -V | head -1)" != "$MIN_RUST" ]; then
    echo "deps: rustc $have is older than $MIN_RUST; install a newer toolchain (rustup) and retry" >&2
    exit 1
fi

# aioquic, the QUIC stack of the QUIC lab's backends and client
# (lab/scripts/quic/), in a venv of its own: Debian 12 does not package it.
AIOQUIC_VENV=/opt/weir-lab/aioquic
AIOQUIC_VERSION=1.7.2
if ! "$AIOQUIC_VENV/bin/python" -c "import aioquic, sys; sys.exit(aioquic.__version__ != '$AIOQUIC_VERSION')" 2>/dev/null; then
    dpkg-query -W -f='${Status}' python3-venv 2>/dev/null | grep -q "install ok installed" || {
        echo "deps: installing python3-venv"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    }
    echo "deps: installing aioquic $AIOQUIC_VERSION in $AIOQUIC_VENV"
    mkdir -p "$(dirname "$AIOQUIC_VENV")"
    python3 -m venv "$AIOQUIC_VENV"
    "$AIOQUIC_VENV/bin/pip" install -q "aioquic==$AIOQUIC_VERSION"
fi
