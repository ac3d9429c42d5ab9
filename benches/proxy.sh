#!/usr/bin/env bash
# Overhead of `ratescope proxy` with no limit (see BENCHMARKS.md): the same unlimited burst
# against the demo API's /open route directly, through ratescope's proxy, through a bare hyper
# proxy (benches/bare_proxy.rs: the floor of hyper on tokio) and through nginx
# `proxy_pass` (a keep-alive upstream pool) in front of the same demo API, alternating for
# ROUNDS rounds; the latency each proxy adds at p50 and p99 (medians of the rounds).
# Then, with oha installed, the same three paced well below saturation (PACED_RATE requests/s,
# 4 in flight, oha's latency): what each proxy adds to a request when nothing queues.
# Usage: benches/proxy.sh [REQUESTS] [CONCURRENCY] [ROUNDS]   (SKIP_BUILD=1: use the release
# binary as built; PACED_RATE=0 skips the paced part; nginx from Debian's package, skipped
# when missing)
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-20000}
concurrency=${2:-32}
rounds=${3:-5}
. benches/demo_api.sh
release_binary --no-default-features
mock_port=18797
proxy_port=18798
nginx_port=18799
bare_port=18796
# The floor: hyper on tokio with nothing else (benches/bare_proxy.rs).
# BARE_BIN=PATH: a bare_proxy built before (it uses nothing of ratescope's, and its own build
# relinks the whole library after each change).
bare_bin=${BARE_BIN:-$(cargo build --release --quiet --bench bare_proxy --message-format=json \
    | python3 -c 'import json, sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["name"] == "bare_proxy"][-1])')}
work=$(mktemp -d)
export RATESCOPE_CONFIG_DIR="$work"
"$bin" mock --port "$mock_port" >"$work/mock.log" 2>&1 &
mock=$!
"$bin" proxy --listen "127.0.0.1:$proxy_port" --route "demo=http://127.0.0.1:$mock_port" >"$work/proxy.log" 2>&1 &
proxy=$!
nginx=""
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
if [ -x "$nginx_bin" ]; then
    mkdir -p "$work/nginx/logs"
    sed -e "s/{{PORT}}/$nginx_port/" -e "s/{{UPSTREAM}}/127.0.0.1:$mock_port/" benches/nginx-proxy.conf.template \
        >"$work/nginx/nginx.conf"
    "$nginx_bin" -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/logs/error.log" &
    nginx=$!
fi
"$bare_bin" "127.0.0.1:$bare_port" "127.0.0.1:$mock_port" /demo >"$work/bare.log" 2>&1 &
bare=$!
trap 'kill $mock $proxy $nginx $bare 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$proxy_port/demo/open" >/dev/null 2>&1 && break; sleep 0.1; done
[ -z "$nginx" ] || for _ in $(seq 50); do curl -sf "http://127.0.0.1:$nginx_port/demo/open" >/dev/null 2>&1 && break; sleep 0.1; done
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$bare_port/demo/open" >/dev/null 2>&1 && break; sleep 0.1; done

# Runs `$1 URL TARGET ROUND` for direct, ratescope and nginx, alternating for $rounds rounds.
alternate() {
    for round in $(seq "$rounds"); do
        "$1" "http://127.0.0.1:$mock_port/open" direct "$round"
        "$1" "http://127.0.0.1:$proxy_port/demo/open" ratescope "$round"
        "$1" "http://127.0.0.1:$bare_port/demo/open" bare "$round"
        [ -z "$nginx" ] || "$1" "http://127.0.0.1:$nginx_port/demo/open" nginx "$round"
    done
}

# Medians over the rounds of each target, and what each proxy adds to direct's latency.
# $1: saturated (`burst --json` summaries, with req/s) or paced (oha's JSON).
summarise() {
    python3 - "$work" "$rounds" "$1" <<'PY'
import json, os, statistics, sys
work, rounds, phase = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def runs(name):
    paths = [os.path.join(work, f"{phase}-{name}-{r}.json") for r in range(1, rounds + 1)]
    return [json.load(open(p)) for p in paths if os.path.exists(p)]
def ms(run, q):
    return run["service_ms"][q] if phase == "saturated" else run["latencyPercentiles"][q] * 1000
direct = runs("direct")
for name in ("direct", "ratescope", "bare", "nginx"):
    summaries = runs(name)
    if not summaries:
        continue
    line = f"{name:9}"
    if phase == "saturated":
        assert all(s["succeeded"] == s["requests"] for s in summaries), name
        rps = statistics.median(s["achieved_rps"] for s in summaries)
        line += f" {rps:8.0f} req/s "
    p50 = statistics.median(ms(s, "p50") for s in summaries)
    p99 = statistics.median(ms(s, "p99") for s in summaries)
    line += f" p50 {p50:.3f} ms  p99 {p99:.3f} ms"
    if name != "direct":
        added50 = statistics.median(ms(s, "p50") - ms(d, "p50") for s, d in zip(summaries, direct))
        added99 = statistics.median(ms(s, "p99") - ms(d, "p99") for s, d in zip(summaries, direct))
        line += f"  added p50 {added50:+.3f} ms  p99 {added99:+.3f} ms"
        if phase == "saturated":
            share = rps / statistics.median(s["achieved_rps"] for s in direct) * 100
            line += f"  {share:.1f}% of direct's req/s"
    print(line)
# The goal's comparison, round by round: each round's pair ran back to back, so the difference
# is less exposed to the VM's slow minutes than the medians' (which come from different rounds).
ours, theirs = runs("ratescope"), runs("nginx")
if ours and theirs:
    gaps = [(ms(a, "p50") - ms(b, "p50")) * 1000 for a, b in zip(ours, theirs)]
    level = sum(gap <= 0 for gap in gaps)
    sys.path.insert(0, "benches")
    from paired import describe
    print(f"ratescope - nginx p50, paired by round: {describe(gaps, lambda us: f'{us:+.0f} us')}; "
          f"ratescope at or below nginx in {level} of {len(gaps)} rounds")
PY
}

saturated() {
    "$bin" burst "$1" -n "$requests" -c "$concurrency" --no-limit --retries 0 --json >"$work/saturated-$2-$3.json"
}
echo "== $requests requests, $concurrency in flight, no limit, $rounds rounds (direct, ratescope, bare hyper, nginx alternate)"
alternate saturated
summarise saturated

paced_rate=${PACED_RATE:-2000}
if [ "$paced_rate" = 0 ] || ! command -v oha >/dev/null; then
    exit 0
fi
paced_requests=$((paced_rate * 5))
paced() {
    oha -n "$paced_requests" -c 4 -q "$paced_rate" --no-tui --output-format json "$1" >"$work/paced-$2-$3.json"
}
echo "== paced: $paced_requests requests at $paced_rate/s, 4 in flight (oha), $rounds rounds (direct, ratescope, bare hyper, nginx alternate)"
alternate paced
summarise paced
