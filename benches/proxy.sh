#!/usr/bin/env bash
# Overhead of `ratescope proxy` with no limit (see BENCHMARKS.md): the same unlimited burst
# against the demo API's /open route directly and through the proxy, in one run, and the
# latency the proxy adds at p50 and p99.
# Usage: benches/proxy.sh [REQUESTS] [CONCURRENCY]   (SKIP_BUILD=1: use the release binary as built)
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-20000}
concurrency=${2:-32}
[ -n "${SKIP_BUILD:-}" ] || cargo build --release --quiet --no-default-features
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
bin="$target_dir/release/ratescope"
mock_port=18797
proxy_port=18798
work=$(mktemp -d)
export RATESCOPE_CONFIG_DIR="$work"
"$bin" mock --port "$mock_port" >"$work/mock.log" 2>&1 &
mock=$!
"$bin" proxy --listen "127.0.0.1:$proxy_port" --route "demo=http://127.0.0.1:$mock_port" >"$work/proxy.log" 2>&1 &
proxy=$!
trap 'kill $mock $proxy 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$proxy_port/demo/open" >/dev/null 2>&1 && break; sleep 0.1; done

run() {
    "$bin" burst "$1" -n "$requests" -c "$concurrency" --no-limit --retries 0 --json >"$work/$2.json"
}
echo "== $requests requests, $concurrency in flight, no limit"
run "http://127.0.0.1:$mock_port/open" direct
run "http://127.0.0.1:$proxy_port/demo/open" proxied
python3 - "$work/direct.json" "$work/proxied.json" <<'PY'
import json, sys
direct, proxied = (json.load(open(path)) for path in sys.argv[1:3])
for name, s in (("direct", direct), ("proxied", proxied)):
    print(f"{name:8} {s['achieved_rps']:8.0f} req/s  p50 {s['service_ms']['p50']:.3f} ms  p99 {s['service_ms']['p99']:.3f} ms  ok {s['succeeded']}/{s['requests']}")
added = {q: proxied['service_ms'][q] - direct['service_ms'][q] for q in ('p50', 'p99')}
print(f"added by the proxy: p50 {added['p50']:+.3f} ms  p99 {added['p99']:+.3f} ms  throughput {proxied['achieved_rps'] / direct['achieved_rps'] * 100:.1f}% of direct")
PY
