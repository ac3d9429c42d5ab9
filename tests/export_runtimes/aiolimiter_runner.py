#!/usr/bin/env python3
"""Fires N GET requests at URL through an exported aiolimiter module, all started at once, and
prints {"statuses": {...}, "elapsed_s": ...} (elapsed from the first start to the last answer).

    python3 aiolimiter_runner.py MODULE URL N
"""

import asyncio
import importlib.util
import json
import sys
import time
from urllib.parse import urlsplit


async def get(url):
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    target = parts.path or "/"
    writer.write(f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    status_line = await reader.readline()
    await reader.read()
    writer.close()
    await writer.wait_closed()
    return int(status_line.split()[1])


async def main(module_path, url, n):
    spec = importlib.util.spec_from_file_location("exported_limits", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    limiter = module.limiter
    statuses = {}

    async def one():
        async with limiter:
            status = await get(url)
        statuses[str(status)] = statuses.get(str(status), 0) + 1

    started = time.monotonic()
    await asyncio.gather(*(one() for _ in range(n)))
    print(json.dumps({"statuses": statuses, "elapsed_s": time.monotonic() - started}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
