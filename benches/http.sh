#!/usr/bin/env bash
# HTTP benchmarks of `ratescope burst` against the demo API (see BENCHMARKS.md):
#   1. raw throughput with --no-limit beside oha, same request count and concurrency;
#   2. pacing accuracy: 1,000 requests/s for 30 s through the limiter.
# Usage: benches/http.sh [REQUESTS] [CONCURRENCY] [ROUNDS]   (needs `cargo install oha` for part 1;
# SKIP_BUILD=1: the release binary as built)
# A shared 2-core VM is noisy: each tool runs ROUNDS times, alternating, and medians are compared.
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-50000}
concurrency=${2:-50}
rounds=${3:-5}
# The CLI alone (the GUI is not measured here); SKIP_BUILD=1 measures the release binary as
# built (`cargo build --release`, the README's, with the app).
. benches/demo_api.sh
release_binary --no-default-features
port=18787
start_demo_api "$bin" "$port"
url="http://127.0.0.1:$port/open"

echo "== raw throughput: $requests requests, $concurrency in flight, $url, $rounds rounds (ratescope and oha alternate)"
if ! command -v oha >/dev/null; then
    echo "oha is not installed (cargo install oha): ratescope alone"
fi
for round in $(seq "$rounds"); do
    "$bin" burst "$url" -n "$requests" -c "$concurrency" --no-limit --retries 0 --json >"$work/raw.json"
    python3 -c "import json; s=json.load(open('$work/raw.json')); assert s['succeeded'] == $requests, s; print(s['achieved_rps'])" >>"$work/ratescope.rps"
    if command -v oha >/dev/null; then
        oha -n "$requests" -c "$concurrency" --no-tui --output-format json "$url" >"$work/oha.json"
        python3 -c "import json; print(json.load(open('$work/oha.json'))['summary']['requestsPerSec'])" >>"$work/oha.rps"
    fi
done
python3 - "$work" <<'PY'
import os, statistics, sys
def rates(name):
    path = os.path.join(sys.argv[1], name + ".rps")
    return [float(line) for line in open(path)] if os.path.exists(path) else []
ours, oha = rates("ratescope"), rates("oha")
print(f"ratescope: median {statistics.median(ours):.0f} req/s  rounds {[round(r) for r in ours]}")
if oha:
    print(f"oha:       median {statistics.median(oha):.0f} req/s  rounds {[round(r) for r in oha]}")
    print(f"ratescope / oha: {statistics.median(ours) / statistics.median(oha):.2f} (medians)")
    # Each round's pair ran back to back: their ratio is less exposed to the VM's slow minutes.
    sys.path.insert(0, "benches")
    from paired import describe
    ratios = [a / b for a, b in zip(ours, oha)]
    print(f"ratescope / oha, the rounds' ratios: {describe(ratios, lambda ratio: f'{ratio:.2f}')}")
PY

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
