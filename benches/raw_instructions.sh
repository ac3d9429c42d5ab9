#!/usr/bin/env bash
# Instructions a raw request costs the client (see BENCHMARKS.md, "HTTP: raw throughput"):
# `ratescope burst --no-limit` and oha against the demo API's /open, each under valgrind's
# callgrind, twice: REQUESTS and REQUESTS/6 requests at -c 50. The difference of the two runs'
# totals over the difference of their requests is the count a request (start-up and exit cancel
# out); beside it, the code lines the larger run ran at least once a request
# (benches/callgrind_counts.py). Unlike req/s on a shared VM, both repeat from run to run.
# Usage: benches/raw_instructions.sh [REQUESTS]   (SKIP_BUILD=1: the release binary as built;
# OUT_DIR=DIR keeps the callgrind files; valgrind from Debian's packages; oha skipped when missing)
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-12000}
small=$((requests / 6))
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
. benches/demo_api.sh
release_binary
port=18767
start_demo_api "$bin" "$port"
url="http://127.0.0.1:$port/open"

# Runs `name command...` (with {N} for the request count) at both sizes; prints its counts.
measure() {
    local name=$1
    shift
    for n in "$small" "$requests"; do
        valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$out/$name-$n.callgrind" \
            "${@//\{N\}/$n}" >"$work/$name-$n.log" 2>&1
    done
    python3 benches/callgrind_counts.py "$name" "$out/$name-$requests.callgrind" "$requests" \
        "$out/$name-$small.callgrind" "$small"
}

echo "== instructions a raw request, $small and $requests requests at -c 50 (callgrind)"
measure ratescope "$bin" burst "$url" -n '{N}' -c 50 --no-limit --retries 0
if command -v oha >/dev/null; then
    measure oha oha -n '{N}' -c 50 --no-tui --output-format json "$url"
else
    echo "oha is not installed (cargo install oha): ratescope alone"
fi
