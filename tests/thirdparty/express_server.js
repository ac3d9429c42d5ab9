#!/usr/bin/env node
// Express + express-rate-limit on 127.0.0.1 for ratescope's conformance tests.
//
// GET /items is limited (in-memory store, express-rate-limit's own defaults otherwise);
// GET /health is not. Prints exactly one line, `listening on 127.0.0.1:PORT`, once bound.
//
//   node express_server.js [--port N] [--window-ms N] [--limit N]
//                          [--headers draft-6|draft-7|draft-8|legacy] [--exit-on-eof]
//
// --headers legacy  = standardHeaders: false,   legacyHeaders: true  (X-RateLimit-*)
// --headers draft-N = standardHeaders: 'draft-N', legacyHeaders: false
'use strict';

const express = require('express');
const { rateLimit } = require('express-rate-limit');

const HEADER_MODES = ['draft-6', 'draft-7', 'draft-8', 'legacy'];

function usage(message) {
  process.stderr.write(
    `${message}\nusage: node express_server.js [--port N] [--window-ms N] [--limit N] ` +
      `[--headers ${HEADER_MODES.join('|')}] [--exit-on-eof]\n`,
  );
  process.exit(2);
}

function parseArgs(argv) {
  const options = { port: 0, windowMs: 2000, limit: 10, headers: 'draft-7', exitOnEof: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const [flag, inline] = arg.startsWith('--') && arg.includes('=') ? arg.split(/=(.*)/s, 2) : [arg, undefined];
    const value = () => {
      if (inline !== undefined) return inline;
      if (i + 1 >= argv.length) usage(`${flag} needs a value`);
      return argv[++i];
    };
    const integer = (min) => {
      const text = value();
      if (!/^\d+$/.test(text) || Number(text) < min || !Number.isSafeInteger(Number(text))) {
        usage(`${flag} wants an integer >= ${min}, not ${JSON.stringify(text)}`);
      }
      return Number(text);
    };
    switch (flag) {
      case '--port':
        options.port = integer(0);
        if (options.port > 65535) usage('--port must be at most 65535');
        break;
      case '--window-ms':
        options.windowMs = integer(1);
        break;
      case '--limit':
        options.limit = integer(0);
        break;
      case '--headers':
        options.headers = value();
        if (!HEADER_MODES.includes(options.headers)) usage(`unknown --headers ${options.headers}`);
        break;
      case '--exit-on-eof':
        options.exitOnEof = true;
        break;
      case '-h':
      case '--help':
        usage('Express + express-rate-limit on 127.0.0.1');
        break;
      default:
        usage(`unknown argument ${arg}`);
    }
  }
  return options;
}

function main() {
  const options = parseArgs(process.argv.slice(2));
  const legacy = options.headers === 'legacy';
  const limiter = rateLimit({
    windowMs: options.windowMs,
    limit: options.limit,
    standardHeaders: legacy ? false : options.headers,
    legacyHeaders: legacy,
  });

  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  app.get('/health', (_request, response) => {
    response.type('text/plain').send('ok\n');
  });
  app.get('/items', limiter, (_request, response) => {
    response.type('text/plain').send('ok\n');
  });

  const server = app.listen(options.port, '127.0.0.1', (error) => {
    if (error) {
      process.stderr.write(`express_server: cannot listen: ${error.message}\n`);
      process.exit(1);
    }
    process.stdout.write(`listening on 127.0.0.1:${server.address().port}\n`);
  });

  if (options.exitOnEof) {
    // A crashed test process closes our stdin: leave no server behind.
    process.stdin.on('end', () => process.exit(0));
    process.stdin.on('error', () => process.exit(0));
    process.stdin.resume();
  }
  for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(0));
}

main();
