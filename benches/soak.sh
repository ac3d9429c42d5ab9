#!/usr/bin/env bash
# Soak of `ratescope proxy` (see BENCHMARKS.md, "Soak"): the demo API with faults on (5xx,
# dropped connections, slow bodies), the proxy in front of it (a limit, retries, the cache), and
# a steady arrival rate of requests through the proxy for DURATION seconds (50/s against a
# limit of 40/s, so the proxy also queues and sheds with 429s all along). Every INTERVAL it
# samples, for the proxy and the demo API: RSS (VmRSS), open file descriptors, threads and CPU;
# for the proxy also its open connections, requests in flight and tokio tasks alive (from its
# `--stats-every` line). Writes a CSV, prints first/last/max per metric, and exits 1 when the
# proxy's RSS or either process's open fds grew past the tolerance between the warm-up mark and
# the end (median of the first minute after WARMUP against the median of the last minute):
#   RSS:  more than RSS_TOLERANCE_PCT percent (default 10) plus RSS_SLACK_KB (default 1024)
#   fds:  more than FD_TOLERANCE descriptors (default 8)
# The demo API's RSS is reported but not judged: it keeps its last 100,000 arrivals by design
# (`ARRIVAL_LOG_CAPACITY`), so it grows for the whole of a 30-minute run at this rate.
#
# Usage: benches/soak.sh
#   env: DURATION=1800 INTERVAL=10 RATE=50 (requests/s) WARMUP=120 OUT=target/soak.csv
#        SKIP_BUILD=1 (use the release binary as built), BIN=path (this binary instead)
# The load is light on purpose (a few percent of one core for all three processes); the
# summary prints the CPU each process used.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${DURATION:-1800}
interval=${INTERVAL:-10}
rate=${RATE:-50}
warmup=${WARMUP:-120}
rss_tolerance_pct=${RSS_TOLERANCE_PCT:-10}
rss_slack_kb=${RSS_SLACK_KB:-1024}
fd_tolerance=${FD_TOLERANCE:-8}
[ "$duration" -gt $((warmup + 120)) ] || { echo "DURATION must exceed WARMUP + 120 s" >&2; exit 2; }
[ -n "${SKIP_BUILD:-}" ] || cargo build --release --quiet --no-default-features
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
bin=${BIN:-$target_dir/release/ratescope}
out=${OUT:-$target_dir/soak.csv}
mock_port=${MOCK_PORT:-18897}
proxy_port=${PROXY_PORT:-18898}
work=$(mktemp -d)
export RATESCOPE_CONFIG_DIR="$work"

# The demo API for the soak: /work is limited and faulty, /catalog cacheable.
cat >"$work/api.toml" <<'TOML'
[server]
seed = 20

[[routes]]
prefix = "/work"
dialect = "ietf"
status = 429
retry_after = true
latency = { fixed = "5ms", jitter = "5ms" }
faults = { error_rate = 0.05, error_statuses = [500, 503], reset_rate = 0.02, slow_body_rate = 0.02, slow_body = "1s" }

  [[routes.policies]]
  name = "second"
  kind = "token_bucket"
  capacity = 60
  rate = "60/1s"

[[routes]]
prefix = "/catalog"
dialect = "ietf"
cache = true
max_age = "5s"
TOML

pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [ -f "$work/burst.pids" ]; then
        while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$work/burst.pids"
    fi
    rm -rf "$work"
}
trap cleanup EXIT

"$bin" mock --config "$work/api.toml" --port "$mock_port" >"$work/mock.log" 2>&1 &
mock=$!
pids+=("$mock")
"$bin" proxy --listen "127.0.0.1:$proxy_port" --route "soak=http://127.0.0.1:$mock_port" \
    --rate 40/1s --retries 2 --cache --max-queue-wait 5s --stats-every "${interval}s" \
    >"$work/proxy.out" 2>"$work/proxy.log" &
proxy=$!
pids+=("$proxy")
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$proxy_port/soak/catalog" >/dev/null 2>&1 && break; sleep 0.1; done

# The load: a burst of one minute at a fixed arrival rate, then the next, each a new process
# (so caller connections come and go); no client-side limit or retries: the proxy does both.
# A burst's arrivals end after its minute but its queued requests take up to --max-queue-wait
# longer, so the next one starts on the minute, beside that tail: arrivals never pause.
start=$(date +%s)
(
    n=0
    next=$start
    while :; do
        left=$((start + duration - $(date +%s)))
        [ "$left" -gt 0 ] || break
        n=$((n + 1))
        chunk=$((left < 60 ? left : 60))
        "$bin" burst "http://127.0.0.1:$proxy_port/soak/work" "http://127.0.0.1:$proxy_port/soak/catalog" \
            --weights 9,1 --arrival-rate "$rate/1s" --duration "${chunk}s" --no-limit --retries 0 --json \
            >"$work/burst-$n.json" 2>>"$work/burst.log" &
        echo $! >>"$work/burst.pids"
        next=$((next + chunk))
        pause=$((next - $(date +%s)))
        [ "$pause" -le 0 ] || sleep "$pause"
    done
    wait
    times >"$work/load.times"
) &
load=$!
pids+=("$load")

ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
status_kb() { awk -v key="$2:" '$1 == key {print $2}' "/proc/$1/status"; }
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
stat_field() { { grep '^stats:' "$work/proxy.log" || true; } | tail -1 | sed -n "s/.*$1=\([0-9]*\).*/\1/p"; }

echo "t_s,proxy_rss_kb,proxy_fds,proxy_threads,proxy_tasks,proxy_connections,proxy_in_flight,proxy_cpu_pct,mock_rss_kb,mock_fds,mock_threads,mock_cpu_pct" >"$out"
echo "== soak: $duration s at $rate requests/s through the proxy, sampling every $interval s into $out"
prev_proxy=$(cpu_ticks "$proxy")
prev_mock=$(cpu_ticks "$mock")
i=0
while :; do
    t=$((i * interval))
    for pid in "$proxy" "$mock"; do
        kill -0 "$pid" 2>/dev/null || { echo "process $pid exited during the soak" >&2; tail -20 "$work/proxy.log" >&2; exit 1; }
    done
    now_proxy=$(cpu_ticks "$proxy")
    now_mock=$(cpu_ticks "$mock")
    proxy_cpu=$(python3 -c "print(f'{($now_proxy - $prev_proxy) * 100 / ($ticks * $interval):.1f}')")
    mock_cpu=$(python3 -c "print(f'{($now_mock - $prev_mock) * 100 / ($ticks * $interval):.1f}')")
    [ "$i" -gt 0 ] || { proxy_cpu=""; mock_cpu=""; }
    prev_proxy=$now_proxy
    prev_mock=$now_mock
    row="$t,$(status_kb "$proxy" VmRSS),$(fds "$proxy"),$(status_kb "$proxy" Threads),$(stat_field tasks),$(stat_field connections),$(stat_field in_flight),$proxy_cpu"
    row="$row,$(status_kb "$mock" VmRSS),$(fds "$mock"),$(status_kb "$mock" Threads),$mock_cpu"
    echo "$row" >>"$out"
    [ $((t % 60)) -ne 0 ] || echo "  $row"
    [ "$t" -lt "$duration" ] || break
    i=$((i + 1))
    pause=$((start + i * interval - $(date +%s)))
    [ "$pause" -le 0 ] || sleep "$pause"
done
wait "$load" || true

python3 - "$out" "$work" "$work/load.times" "$warmup" "$rss_tolerance_pct" "$rss_slack_kb" "$fd_tolerance" "$duration" <<'PY'
import csv, json, re, statistics, sys
import glob, os
out, work, load_times = sys.argv[1:4]
warmup, rss_pct, rss_slack, fd_tol, duration = (float(x) for x in sys.argv[4:9])
rows = list(csv.DictReader(open(out)))
num = lambda v: float(v) if v not in ("", None) else None
print(f"\n{'metric':<18} {'first':>9} {'at warmup':>9} {'last':>9} {'max':>9}")
for name in rows[0]:
    if name == "t_s":
        continue
    values = [num(r[name]) for r in rows]
    known = [v for v in values if v is not None]
    if not known:
        continue
    at_warmup = next((num(r[name]) for r in rows if float(r["t_s"]) >= warmup and num(r[name]) is not None), None)
    fmt = lambda v: "-" if v is None else (f"{v:.1f}" if name.endswith("pct") else f"{v:.0f}")
    print(f"{name:<18} {fmt(known[0]):>9} {fmt(at_warmup):>9} {fmt(known[-1]):>9} {fmt(max(known)):>9}")

def window(name, lo, hi):
    return statistics.median(num(r[name]) for r in rows if lo <= float(r["t_s"]) < hi and num(r[name]) is not None)
end = float(rows[-1]["t_s"])
failed = False
print(f"\ngrowth, median of [{warmup:.0f} s, {warmup + 60:.0f} s) -> median of the last minute:")
checks = [("proxy_rss_kb", "rss"), ("proxy_fds", "fds"), ("mock_fds", "fds"), ("mock_rss_kb", None)]
for name, kind in checks:
    base, last = window(name, warmup, warmup + 60), window(name, end - 60 + 1e-9, end + 1)
    if kind == "rss":
        limit = base * (1 + rss_pct / 100) + rss_slack
    elif kind == "fds":
        limit = base + fd_tol
    else:
        limit = None
    verdict = "not judged" if limit is None else ("ok" if last <= limit else "GREW")
    failed |= verdict == "GREW"
    bound = "" if limit is None else f" (limit {limit:.0f})"
    print(f"  {name:<14} {base:>9.0f} -> {last:>9.0f}{bound}: {verdict}")

totals = {"requests": 0, "succeeded": 0, "failed": 0, "retries": 0, "cache_hits": 0}
statuses, errors = {}, {}
for path in sorted(glob.glob(os.path.join(work, "burst-*.json"))):
    text = open(path).read().strip()
    if not text:
        continue
    summary = json.loads(text)
    for key in totals:
        totals[key] += summary.get(key, 0)
    for status, count in summary.get("status_counts", {}).items():
        statuses[status] = statuses.get(status, 0) + count
    for error, count in summary.get("errors", {}).items():
        errors[error] = errors.get(error, 0) + count
print(f"\nload: {totals['requests']} requests, {totals['succeeded']} succeeded, {totals['failed']} failed; statuses {dict(sorted(statuses.items()))}")
for error, count in sorted(errors.items(), key=lambda item: -item[1])[:5]:
    print(f"  {count} x {error}")
times = open(load_times).read().split("\n")
secs = lambda t: int(t.split("m")[0]) * 60 + float(t.split("m")[1].rstrip("s"))
if len(times) > 1 and times[1].strip():
    user, system = times[1].split()
    print(f"load generator CPU: {secs(user) + secs(system):.1f} s over {duration:.0f} s ({(secs(user) + secs(system)) * 100 / duration:.1f} % of one core)")
sys.exit(1 if failed else 0)
PY
