-- Exact sliding window, checked and spent in two steps so several budgets can decide together.
--
-- State: a sorted set with one member per admitted unit, scored by its admission time
-- (microseconds, Redis clock), and a counter that makes members unique. An admission at s
-- counts while now < s + window (the engine's rule), so any half-open window holds at most
-- `limit`. Checking writes nothing: it does not even prune.

-- Returns allowed, remaining units, retry-after in microseconds, and the count of expired members.
local function window_check(set, window, limit, cost)
  local horizon = now - window -- members scored <= horizon have left the window
  local expired = redis.call('ZCOUNT', set, '-inf', string.format('%.0f', horizon))
  local used = redis.call('ZCARD', set) - expired
  if used + cost > limit then
    -- The (used + cost - limit)-th oldest live unit must leave before this cost fits.
    local rank = expired + (used + cost - limit) - 1
    local oldest = redis.call('ZRANGE', set, rank, rank, 'WITHSCORES')
    local retry = tonumber(oldest[2]) + window - now
    if retry < 1 then
      retry = 1
    end
    local remaining = limit - used
    if remaining < 0 then
      remaining = 0
    end
    return false, remaining, retry, expired
  end
  return true, limit - used - cost, 0, expired
end

-- Prunes what has left the window and adds `cost` uniquely named members scored now.
local function window_spend(set, counter, window, cost, expired)
  if expired > 0 then
    redis.call('ZREMRANGEBYSCORE', set, '-inf', string.format('%.0f', now - window))
  end
  local last = redis.call('INCRBY', counter, cost)
  local score = string.format('%.0f', now)
  local i = last - cost + 1
  local chunk = 500
  while i <= last do
    local args = {}
    local stop = math.min(i + chunk - 1, last)
    for seq = i, stop do
      args[#args + 1] = score
      args[#args + 1] = score .. ':' .. string.format('%.0f', seq)
    end
    redis.call('ZADD', set, unpack(args))
    i = stop + 1
  end
  local ttl_ms = string.format('%.0f', math.ceil(window / 1000))
  redis.call('PEXPIRE', set, ttl_ms)
  redis.call('PEXPIRE', counter, ttl_ms)
end
