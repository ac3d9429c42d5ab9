-- Settles one admission over its budgets: each budget that counted `was` units for it now
-- counts `is`, refunded or charged in all of them at once.
--
-- ARGV[1]  number of budgets n, ARGV[2] the admission's time (microseconds, Redis clock);
--          then per budget six values: kind (1 bucket, 2 window), period in microseconds
--          (per token, or the window), capacity (or limit), was, is, and the admission's
--          number in that window.
-- KEYS     per budget in order, as decide.lua: a bucket one key (TAT), a window two (set, counter).
--
-- Returns {now, the last admission number of the first window (0 without one)}: every
-- admission numbered up to it came before this settlement, every later one after.

local n = tonumber(ARGV[1])
local at = tonumber(ARGV[2])
local key_at = 1
local last = 0
for i = 1, n do
  local base = 2 + (i - 1) * 6
  local kind = tonumber(ARGV[base + 1])
  local period = tonumber(ARGV[base + 2])
  local capacity = tonumber(ARGV[base + 3])
  local was = tonumber(ARGV[base + 4])
  local is = tonumber(ARGV[base + 5])
  local id = tonumber(ARGV[base + 6])
  if kind == 1 then
    gcra_settle(KEYS[key_at], period, capacity, was, is)
    key_at = key_at + 1
  else
    if was ~= is and id > 0 then
      window_settle(KEYS[key_at], KEYS[key_at + 1], period, capacity, at, id, was, is)
    end
    if last == 0 then
      last = tonumber(redis.call('GET', KEYS[key_at + 1]) or 0) or 0
    end
    key_at = key_at + 2
  end
end
return { now, last }
