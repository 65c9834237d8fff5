#!/usr/bin/env bash
# memcached's own meta-protocol tests against memcached direct, weir kv and
# nutcracker, each with real memcached servers behind it (two behind each
# proxy, so that keys are routed), and the pass counts of each.
#
#   lab/scripts/memcached-meta-tests.sh SOURCE [TEST.t ...]
#
# SOURCE is a memcached source tree (its t/ directory is what is used; it
# need not be built). Take the tree of the installed memcached's version:
# newer tests exercise flags an older server does not know. The tests
# default to t/metaget.t. WEIR names the weir binary (default:
# target/release/weir of this checkout). Everything listens on 127.0.0.1
# and is stopped on exit.
set -euo pipefail

usage() {
    echo "usage: $0 MEMCACHED_SOURCE [TEST.t ...]" >&2
    exit 2
}
[ $# -ge 1 ] || usage
src=$(cd "$1" 2>/dev/null && pwd) || {
    echo "error: memcached source '$1' is not a directory" >&2
    exit 2
}
shift
if [ ! -f "$src/t/lib/MemcachedTest.pm" ]; then
    echo "error: $src has no t/lib/MemcachedTest.pm: give the top of a memcached source tree" >&2
    exit 2
fi
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(t/metaget.t)
for t in "${tests[@]}"; do
    [ -f "$src/$t" ] || { echo "error: no test $src/$t" >&2; exit 2; }
done
here=$(cd "$(dirname "$0")/../.." && pwd)
weir=${WEIR:-$here/target/release/weir}
[ -x "$weir" ] || { echo "error: no weir binary at $weir (cargo build --release -p weir, or set WEIR)" >&2; exit 2; }
for tool in memcached nutcracker perl; do
    command -v "$tool" >/dev/null || { echo "error: $tool is not installed (scripts/deps.sh installs it)" >&2; exit 2; }
done

work=$(mktemp -d /tmp/weir-mc-tests.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# The tests' harness asks a memcached-debug binary in its working directory
# what the server supports: give it the installed memcached, beside the
# source's t/, without extstore. The extstore sections start a server of
# their own with extstore options, which a running daemon (and a proxy in
# front of one) cannot be: they would wait for it until the timeout.
mkdir "$work/tree"
ln -s "$src/t" "$work/tree/t"
printf '#!/bin/sh\n%s "$@" | grep -v ext_\n' "$(command -v memcached)" >"$work/tree/memcached-debug"
chmod +x "$work/tree/memcached-debug"

free_port() {
    perl -MIO::Socket::INET -e 'print IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1:0")->sockport'
}

wait_port() {
    for _ in $(seq 100); do
        if perl -MIO::Socket::INET -e 'exit(IO::Socket::INET->new("127.0.0.1:'"$1"'") ? 0 : 1)'; then
            return 0
        fi
        sleep 0.05
    done
    echo "error: nothing listens on 127.0.0.1:$1 after 5 s ($2)" >&2
    exit 1
}

# Start a memcached; its port is left in $port (not printed: a command
# substitution would start it in a subshell, out of reach of the cleanup).
start_memcached() {
    port=$(free_port)
    memcached -l 127.0.0.1 -p "$port" -U 0 -m 64 -t 2 -u root >/dev/null 2>&1 &
    pids+=($!)
    wait_port "$port" memcached
}

# nutcracker's YAML for a pool on port $1 over the servers on ports $2 $3.
pool_yaml() {
    printf 'meta:\n  listen: 127.0.0.1:%s\n  hash: fnv1a_64\n  distribution: ketama\n  timeout: 2000\n  servers:\n   - 127.0.0.1:%s:1\n   - 127.0.0.1:%s:1\n' "$1" "$2" "$3"
}

# Run the tests against the daemon on port $1; print "passed failed planned".
run_tests() {
    local port=$1 name=$2 log="$work/$2.tap" pass=0 fail=0 plan=0
    for t in "${tests[@]}"; do
        (cd "$work/tree" && T_MEMD_USE_DAEMON="127.0.0.1:$port" timeout 120 perl "$t") >>"$log" 2>&1 || true
    done
    touch "$log"
    pass=$(grep -c '^ok ' "$log" || true)
    fail=$(grep -c '^not ok ' "$log" || true)
    plan=$(sed -n 's/^1\.\.\([0-9][0-9]*\).*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
    echo "$pass $fail $plan"
    cp "$log" "${OUT_DIR:-$work}/$name.tap" 2>/dev/null || true
}

start_memcached
direct=$port

start_memcached
w1=$port
start_memcached
w2=$port
weir_port=$(free_port)
pool_yaml "$weir_port" "$w1" "$w2" >"$work/weir.yml"
"$weir" kv --nutcracker "$work/weir.yml" --metrics off >"$work/weir.log" 2>&1 &
pids+=($!)
wait_port "$weir_port" "weir kv"

start_memcached
n1=$port
start_memcached
n2=$port
nc_port=$(free_port)
pool_yaml "$nc_port" "$n1" "$n2" >"$work/nutcracker.yml"
nutcracker -c "$work/nutcracker.yml" -a 127.0.0.1 -s "$(free_port)" -o "$work/nutcracker.log" &
pids+=($!)
wait_port "$nc_port" nutcracker

echo "memcached $(memcached -V | awk '{print $2}'), tests: ${tests[*]} from $src"
printf '%-18s %7s %7s %8s\n' target passed failed planned
for target in "memcached direct:$direct" "weir kv:$weir_port" "nutcracker:$nc_port"; do
    name=${target%%:*}
    read -r pass fail plan < <(run_tests "${target##*:}" "${name// /-}")
    printf '%-18s %7s %7s %8s\n' "$name" "$pass" "$fail" "$plan"
done
echo "TAP output of each run: ${OUT_DIR:-(set OUT_DIR to keep it)}"
