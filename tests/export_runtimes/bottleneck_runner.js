#!/usr/bin/env node
// Fires N GET requests at URL through an exported Bottleneck module, all scheduled at once, and
// prints {"statuses": {...}, "elapsed_s": ...} (elapsed from the first schedule to the last answer).
//
// One GET of the server's unlimited /health comes first, off the clock: a Node process's first
// fetch loads undici and opens the connection, 40-50 ms here and more on a busy machine. Left in,
// it delays the request that opens express-rate-limit's window while its successors keep their
// spacing, so 19/s spacing (60 ms of slack per 20) meets a window opened late: a cold start of
// this runner, not the limiter's pacing, which is what is under test.
//
//   NODE_PATH=tests/thirdparty/node_modules node bottleneck_runner.js MODULE URL N
'use strict';

const path = require('path');

async function main() {
  const [modulePath, url, count] = process.argv.slice(2);
  const limiter = require(path.resolve(modulePath));
  const n = Number(count);
  const statuses = {};
  const warm = await fetch(new URL('/health', url));
  await warm.text();
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: n }, () =>
      limiter.schedule(async () => {
        const response = await fetch(url);
        await response.text();
        statuses[response.status] = (statuses[response.status] || 0) + 1;
      }),
    ),
  );
  const elapsed = Number(process.hrtime.bigint() - started) / 1e9;
  process.stdout.write(JSON.stringify({ statuses, elapsed_s: elapsed }) + '\n');
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
