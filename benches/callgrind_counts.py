#!/usr/bin/env python3
"""What a program spends on each request, from callgrind files written with `--dump-instr=yes`:
its instructions (the file's total over REQUESTS, or, given a second run of BASE_REQUESTS, the
difference of the two totals over the difference of the requests, so start-up and exit cancel
out), and the code it runs as cache lines: the distinct 64-byte lines whose instructions ran at
least REQUESTS times (about once a request or more). A request served once, straight through,
fetches each of those lines again after the kernel and the other processes have run: the line
count, not the instructions, is what a cold request pays for (see BENCHMARKS.md, "Proxy
overhead").

Usage: benches/callgrind_counts.py NAME FILE REQUESTS [BASE_FILE BASE_REQUESTS]
(TOP=N also lists the N functions spread over the most lines; FEATURES=1 counts the lines whose
code comes from the source files of each of the proxy's features, in a build with line tables.)
"""

import collections
import os
import re
import sys

LINE = 64


class Names:
    """Callgrind's name compression: `(id) name` defines an id, `(id)` reuses it."""

    def __init__(self):
        self.known = {}

    def read(self, text):
        found = re.match(r"\((\d+)\)(?: (.*))?", text)
        if not found:
            return text
        key, name = found.groups()
        if name is not None:
            self.known[key] = name
        return self.known.get(key, key)


def number(text):
    """A callgrind number: hexadecimal after `0x`, else decimal."""
    return int(text[2:], 16) if text.startswith("0x") else int(text)


def position(token, previous):
    """An instruction address: absolute, `+N`/`-N` from the previous one, or `*` (the same)."""
    if token == "*":
        return previous
    if token[0] == "+":
        return previous + number(token[1:])
    if token[0] == "-":
        return previous - number(token[1:])
    return number(token)


# The proxy's features, by the source files their own code is in (not the library code they
# call): what a proxy with the same behaviour runs at the least beyond a bare one.
FEATURES = {
    "routing: the path checked, the route, its limiter and retry policy":
        r"src/proxy/(config|path)\.rs|http/(policy|adaptive)\.rs|ratescope-engine/src/registry\.rs",
    "hop-by-hop headers, X-Forwarded-For, Host": r"src/proxy/hop\.rs",
    "metrics": r"src/proxy/metrics\.rs|/prometheus-client-",
    "head and upstream timeouts (and tokio's timer)":
        r"src/proxy/deadlines\.rs|/tokio-[^/]*/src/(runtime/time|time)/",
    "the attempt loop: retry decision, rate-limit headers":
        r"http/(attempts|answer|retry|report)\.rs|http/headers/|http/client/mod\.rs",
    "the connection: drain and cut-off": r"src/proxy/server\.rs",
}


def runs_by_address(path, files_of=None):
    """Instructions run at each (object, address), and the function each address is in; with
    `files_of` (a dict), also the source file each address's code comes from (inlined or not)."""
    objects, functions, files = Names(), Names(), Names()
    runs = collections.Counter()
    function_of = {}
    obj = function = None
    source = current = None
    address = 0
    call_cost_next = False
    with open(path, errors="replace") as lines:
        for line in lines:
            if not line.strip():
                continue
            first = line[0]
            if first.isdigit() or first in "+-*":
                fields = line.split()
                address = position(fields[0], address)
                if call_cost_next:
                    # The inclusive cost of a call, counted again in the callee: not this line's own.
                    call_cost_next = False
                elif len(fields) > 2:
                    runs[(obj, address)] += int(fields[2])
                    function_of[(obj, address)] = function
                    if files_of is not None:
                        files_of[(obj, address)] = current
                continue
            key, _, rest = line.rstrip("\n").partition("=")
            if key == "ob":
                obj = objects.read(rest)
            elif key == "cob":
                objects.read(rest)
            elif key == "fn":
                function = functions.read(rest)
                current = source
            elif key == "cfn":
                functions.read(rest)
            elif key == "fl":
                source = current = files.read(rest)
            elif key in ("fi", "fe"):
                current = files.read(rest)
            elif key in ("cfi", "cfl"):
                files.read(rest)
            elif key == "calls":
                call_cost_next = True
    return runs, function_of


def total(path):
    """The instructions a callgrind file counts in all (its `summary:` line)."""
    with open(path, errors="replace") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith("summary:"))


def main():
    if len(sys.argv) not in (4, 6):
        sys.exit(__doc__)
    name, path, requests = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if len(sys.argv) == 6:
        base_path, base_requests = sys.argv[4], int(sys.argv[5])
        instructions = (total(path) - total(base_path)) // (requests - base_requests)
    else:
        instructions = total(path) // requests
    files_of = {} if os.environ.get("FEATURES") == "1" else None
    runs, function_of = runs_by_address(path, files_of)
    lines = set()
    by_function = collections.defaultdict(set)
    for (obj, address), count in runs.items():
        if count >= requests:
            line = (obj, address // LINE)
            lines.add(line)
            by_function[function_of[(obj, address)]].add(line)
    print(
        f"{name:9} {instructions:7,d} instructions a request, "
        f"{len(lines):,} code lines ({len(lines) * LINE // 1024} KiB) run for each request"
    )
    top = int(os.environ.get("TOP", "0"))
    for function, touched in sorted(by_function.items(), key=lambda item: -len(item[1]))[:top]:
        print(f"  {len(touched):5} {function}")
    if files_of is not None:
        print_features(runs, files_of, requests)


def print_features(runs, files_of, requests):
    """The code lines of each feature (`FEATURES`), and of all of them: a line may hold code of
    two, so the union is less than the sum."""
    by_feature = collections.defaultdict(set)
    for (obj, address), count in runs.items():
        if count < requests:
            continue
        source = files_of.get((obj, address)) or ""
        for feature, pattern in FEATURES.items():
            if re.search(pattern, source):
                by_feature[feature].add((obj, address // LINE))
    for feature in FEATURES:
        print(f"  {len(by_feature[feature]):5} {feature}")
    print(f"  {len(set().union(*by_feature.values())):5} all of them")


if __name__ == "__main__":
    main()
