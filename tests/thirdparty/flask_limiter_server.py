#!/usr/bin/env python3
"""Flask + Flask-Limiter on 127.0.0.1 for ratescope's conformance tests.

GET /items is limited (Flask-Limiter's header injection on: X-RateLimit-Limit,
X-RateLimit-Remaining, X-RateLimit-Reset and Retry-After); GET /health is exempt.
In-memory storage, threaded Werkzeug server, no reloader, no debug, no request log.
Prints exactly one line, ``listening on 127.0.0.1:PORT``, once the socket is bound.
"""

import argparse
import logging
import os
import sys
import threading

from flask import Flask
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from werkzeug.serving import make_server

STRATEGIES = ("moving-window", "fixed-window", "sliding-window-counter")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = a free one)")
    parser.add_argument("--limit", default="10 per 2 second", help='a Flask-Limiter limit string, e.g. "10 per 2 second"')
    parser.add_argument("--strategy", choices=STRATEGIES, default="moving-window")
    parser.add_argument(
        "--retry-after",
        choices=("delta-seconds", "http-date"),
        default="delta-seconds",
        help="how Flask-Limiter renders Retry-After (RATELIMIT_HEADER_RETRY_AFTER_VALUE)",
    )
    parser.add_argument(
        "--exit-on-eof",
        action="store_true",
        help="exit when standard input closes (so a crashed test process leaves no server behind)",
    )
    return parser.parse_args(argv)


def create_app(limit, strategy, retry_after):
    app = Flask(__name__)
    app.config.update(
        RATELIMIT_HEADERS_ENABLED=True,
        RATELIMIT_HEADER_RETRY_AFTER_VALUE=retry_after,
    )
    limiter = Limiter(
        get_remote_address,
        app=app,
        storage_uri="memory://",
        strategy=strategy,
        headers_enabled=True,
        retry_after=retry_after,
    )

    @app.get("/items")
    @limiter.limit(limit)
    def items():
        return "ok\n", 200, {"Content-Type": "text/plain; charset=utf-8"}

    @app.get("/health")
    @limiter.exempt
    def health():
        return "ok\n", 200, {"Content-Type": "text/plain; charset=utf-8"}

    return app


def watch_stdin():
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        os._exit(0)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Quiet: no per-request lines from Werkzeug, no "exceeded" notes from Flask-Limiter.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    logging.getLogger("flask-limiter").setLevel(logging.ERROR)
    app = create_app(args.limit, args.strategy, args.retry_after)
    server = make_server("127.0.0.1", args.port, app, threaded=True)
    print(f"listening on 127.0.0.1:{server.server_port}", flush=True)
    if args.exit_on_eof:
        threading.Thread(target=watch_stdin, daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
