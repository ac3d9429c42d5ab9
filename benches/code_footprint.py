#!/usr/bin/env python3
"""The code a program runs for each request, as cache lines: reads a callgrind file written
with `--dump-instr=yes` and counts the distinct 64-byte lines of code whose instructions ran at
least REQUESTS times over the run (about once a request or more), with the functions that
spread over the most of them. A request served once, straight through, fetches each of those
lines again after the kernel and the other processes have run: the count, not the number of
instructions, is what a cold request pays for (see BENCHMARKS.md, "Proxy overhead").

Usage: benches/code_footprint.py CALLGRIND_FILE REQUESTS [TOP]   (TOP: how many functions to list)
"""

import collections
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


def runs_by_address(path):
    """Instructions run at each (object, address), and the function each address is in."""
    objects, functions = Names(), Names()
    runs = collections.Counter()
    function_of = {}
    obj = function = None
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
                continue
            key, _, rest = line.rstrip("\n").partition("=")
            if key == "ob":
                obj = objects.read(rest)
            elif key == "cob":
                objects.read(rest)
            elif key == "fn":
                function = functions.read(rest)
            elif key == "cfn":
                functions.read(rest)
            elif key == "calls":
                call_cost_next = True
    return runs, function_of


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, requests = sys.argv[1], int(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    runs, function_of = runs_by_address(path)
    lines = set()
    by_function = collections.defaultdict(set)
    for (obj, address), count in runs.items():
        if count >= requests:
            line = (obj, address // LINE)
            lines.add(line)
            by_function[function_of[(obj, address)]].add(line)
    print(f"{len(lines):,} code lines ({len(lines) * LINE // 1024} KiB) run for each request")
    for function, touched in sorted(by_function.items(), key=lambda item: -len(item[1]))[:top]:
        print(f"  {len(touched):5} {function}")


if __name__ == "__main__":
    main()
