#!/usr/bin/env bash
# HTTP benchmarks of `ratescope burst` against the demo API (see BENCHMARKS.md):
#   1. raw throughput with --no-limit beside oha, same request count and concurrency;
#   2. pacing accuracy: 1,000 requests/s for 30 s through the limiter.
# Usage: benches/http.sh [REQUESTS] [CONCURRENCY]   (needs `cargo install oha` for part 1)
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-50000}
concurrency=${2:-50}
cargo build --release --no-default-features --quiet   # the CLI alone; the GUI is not measured here
bin=target/release/ratescope
port=18787
work=$(mktemp -d)
export RATESCOPE_CONFIG_DIR="$work"
"$bin" mock --port "$port" >"$work/mock.log" 2>&1 &
mock=$!
trap 'kill $mock 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/open" >/dev/null 2>&1 && break; sleep 0.1; done
url="http://127.0.0.1:$port/open"

echo "== raw throughput: $requests requests, $concurrency in flight, $url"
"$bin" burst "$url" -n "$requests" -c "$concurrency" --no-limit --retries 0 --json >"$work/raw.json"
python3 -c "import json,sys; s=json.load(open('$work/raw.json')); print(f\"ratescope: {s['achieved_rps']:.0f} req/s  p50 {s['service_ms']['p50']:.2f} ms  p99 {s['service_ms']['p99']:.2f} ms  ok {s['succeeded']}\")"
if command -v oha >/dev/null; then
    oha -n "$requests" -c "$concurrency" --no-tui --output-format json "$url" >"$work/oha.json"
    python3 -c "import json; s=json.load(open('$work/oha.json'))['summary']; print(f\"oha:       {s['requestsPerSec']:.0f} req/s  ok {s['successRate']*100:.1f}%\")"
else
    echo "oha is not installed: cargo install oha"
fi

echo "== pacing accuracy: 1000/s for 30 s through the limiter"
"$bin" burst "$url" -n 30000 --rate 1000/1s --burst 10 -c 200 --json --csv "$work/paced.csv" >"$work/paced.json"
python3 - "$work/paced.json" "$work/paced.csv" <<'PY'
import csv, json, sys
summary = json.load(open(sys.argv[1]))
sent = sorted(float(row["sent_at_ms"]) for row in csv.DictReader(open(sys.argv[2])))
# The first 10 go at once (the burst); the rest at 1000/s.
burst = 10
span = (sent[-1] - sent[burst - 1]) / 1000.0
rate = (len(sent) - burst) / span
worst, j = 0, 0
for i, t in enumerate(sent):
    while sent[j] <= t - 1000.0:
        j += 1
    worst = max(worst, i - j + 1)
print(f"ratescope: {rate:.2f} req/s after the burst ({rate / 10:.2f}% of 1000/s) over {span:.3f} s; busiest 1 s window: {worst} (allowance 1000 + burst 10); ok {summary['succeeded']}/{summary['requests']}")
PY
