-- Token bucket as GCRA: one atomic decision for `cost` tokens.
--
-- KEYS[1]  the theoretical arrival time (TAT), microseconds on the Redis clock
-- ARGV[1]  microseconds per token (T)
-- ARGV[2]  capacity (the burst: tau = capacity * T)
-- ARGV[3]  cost
--
-- Returns {allowed (0|1), remaining tokens, retry_after in microseconds (0 when allowed)}.
-- A denied request writes nothing. Every number stays an integer below 2^53, so Lua's
-- doubles hold it exactly.

-- `now` comes from clock.lua, prepended when the script is built.

local per = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local tau = per * capacity

local tat = tonumber(redis.call('GET', KEYS[1]) or now) or now
if tat < now then
  tat = now
end

local new_tat = tat + cost * per
local allow_at = new_tat - tau
if allow_at > now then
  -- Tokens available right now, too few for this cost.
  local remaining = math.floor((tau - (tat - now)) / per)
  if remaining < 0 then
    remaining = 0
  end
  return { 0, remaining, allow_at - now }
end

-- The key lives until the bucket is full again; after that a missing key means the same.
local ttl_ms = math.ceil((new_tat - now) / 1000)
if ttl_ms < 1 then
  ttl_ms = 1
end
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', string.format('%.0f', ttl_ms))
return { 1, math.floor((tau - (new_tat - now)) / per), 0 }
