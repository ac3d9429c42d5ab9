-- One atomic decision over any number of budgets: a request passes only if every budget
-- allows it, and then (and only then) it is spent in all of them.
--
-- ARGV[1]  number of budgets n; then per budget four values: kind (1 bucket, 2 window),
--          period in microseconds (per token, or the window), capacity (or limit), cost.
-- KEYS     per budget in order: a bucket takes one key (TAT), a window two (set, counter).
--
-- Returns {allowed (0|1), remaining, retry_after in microseconds, blocking budget (1-based)}.
-- Allowed: remaining is the least left in any budget, retry 0, blocking 0, then the admission's
-- time (microseconds) and per budget its admission number (windows; 0 for buckets), which a
-- settlement names. Denied: the budget that needs the longest wait, its remaining and that
-- wait; nothing is written. A budget a settlement charged into debt denies even a request
-- that spends nothing in it, until the debt is paid.

local n = tonumber(ARGV[1])
local checks = {}
local key_at = 1
local least = nil
local worst_retry, worst_remaining, worst_index = 0, 0, 0
for i = 1, n do
  local base = 1 + (i - 1) * 4
  local kind = tonumber(ARGV[base + 1])
  local period = tonumber(ARGV[base + 2])
  local capacity = tonumber(ARGV[base + 3])
  local cost = tonumber(ARGV[base + 4])
  local ok, remaining, retry, extra
  if kind == 1 then
    ok, remaining, retry, extra = gcra_check(KEYS[key_at], period, capacity, cost)
    checks[i] = { kind, KEYS[key_at], nil, period, cost, extra }
    key_at = key_at + 1
  else
    ok, remaining, retry, extra = window_check(KEYS[key_at], period, capacity, cost)
    checks[i] = { kind, KEYS[key_at], KEYS[key_at + 1], period, cost, extra }
    key_at = key_at + 2
  end
  if not ok and retry > worst_retry then
    worst_retry, worst_remaining, worst_index = retry, remaining, i
  end
  if least == nil or remaining < least then
    least = remaining
  end
end

if worst_index > 0 then
  return { 0, worst_remaining, worst_retry, worst_index }
end

local reply = { 1, least or 0, 0, 0, now }
for i = 1, n do
  local c = checks[i]
  local id = 0
  if c[1] == 2 then
    -- Numbered even when it spends nothing here: a settlement may still charge this window.
    id = window_spend(c[2], c[3], c[4], c[5], c[6])
  elseif c[5] > 0 then
    gcra_spend(c[2], c[6])
  end
  reply[5 + i] = id
end
return reply
