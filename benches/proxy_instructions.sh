#!/usr/bin/env bash
# Instructions each proxy spends on one forwarded request (see BENCHMARKS.md): ratescope's
# proxy, the bare hyper proxy (benches/bare_proxy.rs) and nginx `proxy_pass`, in front of the
# demo API's /open, each under valgrind's callgrind. A warm-up burst first, then the counters are
# zeroed and REQUESTS requests sent 4 at a time (`ratescope burst`); the count is the
# proxy's user-space instructions over them, divided by REQUESTS. Unlike latency on a shared VM,
# the count repeats from run to run: it tells which proxy does more work, and where (the
# callgrind files stay in OUT_DIR for callgrind_annotate). Beside it, the code each request runs
# as 64-byte lines (benches/callgrind_counts.py): what a request served cold fetches again.
# Usage: benches/proxy_instructions.sh [REQUESTS]   (SKIP_BUILD=1: the release binary as built;
# BARE_BIN=PATH: a bare_proxy built before; OUT_DIR=DIR keeps the callgrind files; TOP=N and
# FEATURES=1 as benches/callgrind_counts.py says, with line tables in the build; valgrind and
# nginx from Debian's packages, nginx skipped when missing)
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-10000}
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
. benches/demo_api.sh
release_binary --no-default-features
bare_bin=${BARE_BIN:-$(cargo build --release --quiet --bench bare_proxy --message-format=json \
    | python3 -c 'import json, sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["name"] == "bare_proxy"][-1])')}
mock_port=18777
proxy_port=18778
proxy=""
start_demo_api "$bin" "$mock_port"

url="http://127.0.0.1:$proxy_port/demo/open"
burst() {
    "$bin" burst "$url" -n "$1" -c 4 --no-limit --retries 0 >/dev/null
}

# Runs one proxy (the command after its name) under callgrind; prints its instructions a request.
measure() {
    local name=$1
    shift
    valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$out/$name.callgrind" "$@" >"$work/$name.log" 2>&1 &
    proxy=$!
    for _ in $(seq 300); do curl -sf "$url" >/dev/null 2>&1 && break; sleep 0.1; done
    burst 2000
    callgrind_control --zero "$proxy" >/dev/null 2>&1
    burst "$requests"
    callgrind_control --dump "$proxy" >/dev/null 2>&1
    # The measured part is written: stop the proxy (SIGTERM; killed if it lingers).
    kill -TERM "$proxy" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$proxy" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$proxy" 2>/dev/null || true
    wait "$proxy" 2>/dev/null || true
    proxy=""
    # The dump after zeroing is the file with the `.1` suffix: the measured requests alone.
    python3 benches/callgrind_counts.py "$name" "$out/$name.callgrind.1" "$requests"
}

echo "== instructions a request, $requests requests 4 at a time through each proxy (callgrind)"
measure ratescope "$bin" proxy --listen "127.0.0.1:$proxy_port" --route "demo=http://127.0.0.1:$mock_port"
measure bare "$bare_bin" "127.0.0.1:$proxy_port" "127.0.0.1:$mock_port" /demo
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
if [ -x "$nginx_bin" ]; then
    mkdir -p "$work/nginx/logs"
    sed -e "s/{{PORT}}/$proxy_port/" -e "s/{{UPSTREAM}}/127.0.0.1:$mock_port/" benches/nginx-proxy.conf.template \
        >"$work/nginx/nginx.conf"
    measure nginx "$nginx_bin" -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/logs/error.log"
fi
