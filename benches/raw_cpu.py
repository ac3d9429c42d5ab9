#!/usr/bin/env python3
"""CPU a raw burst costs against oha's for the same requests (see BENCHMARKS.md): user and
system time of each whole process (from wait4), 100,000 GETs with 50 in flight against the demo
API's /open, the two alternating for ROUNDS rounds; medians. Less exposed to a shared VM's slow
minutes than requests per second.

    benches/raw_cpu.py [BINARY] [ROUNDS]    (default target/release/ratescope, 5; needs oha)
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

REQUESTS = 100_000
PORT = 18789


def cpu_ms(command, env):
    """(user + system, user) milliseconds of `command` run to its end."""
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        sys.exit(f"{command[0]} failed ({status})")
    return (usage.ru_utime + usage.ru_stime) * 1000, usage.ru_utime * 1000


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/ratescope"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    env = dict(os.environ, RATESCOPE_CONFIG_DIR=tempfile.mkdtemp())
    mock = subprocess.Popen([binary, "mock", "--port", str(PORT)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    try:
        time.sleep(1)
        url = f"http://127.0.0.1:{PORT}/open"
        ours, oha = [], []
        for _ in range(rounds):
            ours.append(cpu_ms([binary, "burst", url, "-n", str(REQUESTS), "-c", "50", "--no-limit",
                                "--retries", "0", "--json"], env))
            oha.append(cpu_ms(["oha", "-n", str(REQUESTS), "-c", "50", "--no-tui", url], env))
    finally:
        mock.kill()
    for name, rows in (("ratescope", ours), ("oha", oha)):
        total = statistics.median(row[0] for row in rows)
        user = statistics.median(row[1] for row in rows)
        print(f"{name}: {total:.0f} ms CPU per {REQUESTS:,} requests (user {user:.0f}); "
              f"rounds {[round(row[0]) for row in rows]}")


if __name__ == "__main__":
    main()
