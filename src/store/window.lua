-- Exact sliding window: one atomic decision for `cost` units.
--
-- KEYS[1]  sorted set, one member per admitted unit, scored by its admission time (microseconds, Redis clock)
-- KEYS[2]  counter that makes members unique
-- ARGV[1]  window length in microseconds
-- ARGV[2]  limit (units in any window)
-- ARGV[3]  cost
--
-- An admission at s counts while now < s + window (the engine's rule), so any half-open
-- window holds at most `limit`. Returns {allowed (0|1), remaining units, retry_after in
-- microseconds (0 when allowed)}. A denied request writes nothing: it does not even prune.

-- `now` comes from clock.lua, prepended when the script is built.

local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local horizon = now - window -- members scored <= horizon have left the window

local expired = redis.call('ZCOUNT', KEYS[1], '-inf', string.format('%.0f', horizon))
local used = redis.call('ZCARD', KEYS[1]) - expired

if used + cost > limit then
  -- The (used + cost - limit)-th oldest live unit must leave before this cost fits.
  local need = used + cost - limit
  local rank = expired + need - 1
  local oldest = redis.call('ZRANGE', KEYS[1], rank, rank, 'WITHSCORES')
  local retry = tonumber(oldest[2]) + window - now
  if retry < 1 then
    retry = 1
  end
  local remaining = limit - used
  if remaining < 0 then
    remaining = 0
  end
  return { 0, remaining, retry }
end

if expired > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', horizon))
end

local last = redis.call('INCRBY', KEYS[2], cost)
local score = string.format('%.0f', now)
local first = last - cost + 1
local chunk = 500
local i = first
while i <= last do
  local args = {}
  local stop = math.min(i + chunk - 1, last)
  for seq = i, stop do
    args[#args + 1] = score
    args[#args + 1] = score .. ':' .. string.format('%.0f', seq)
  end
  redis.call('ZADD', KEYS[1], unpack(args))
  i = stop + 1
end

local ttl_ms = string.format('%.0f', math.ceil(window / 1000))
redis.call('PEXPIRE', KEYS[1], ttl_ms)
redis.call('PEXPIRE', KEYS[2], ttl_ms)
return { 1, limit - used - cost, 0 }
