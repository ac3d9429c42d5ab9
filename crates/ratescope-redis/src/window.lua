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

-- The member naming unit `i` of the admission `id` at `score` (a formatted integer).
local function window_member(score, id, i)
  return score .. ':' .. string.format('%.0f', id) .. ':' .. string.format('%.0f', i)
end

-- Adds (ZADD) or removes (ZREM) the members `from`..`to` of the admission `id` at `score`, in chunks.
local function window_members(verb, set, score, id, from, to)
  local i = from
  local chunk = 500
  while i <= to do
    local args = {}
    local stop = math.min(i + chunk - 1, to)
    for unit = i, stop do
      if verb == 'ZADD' then
        args[#args + 1] = score
      end
      args[#args + 1] = window_member(score, id, unit)
    end
    redis.call(verb, set, unpack(args))
    i = stop + 1
  end
end

local function window_expire(set, counter, window)
  local ttl_ms = string.format('%.0f', math.ceil(window / 1000))
  redis.call('PEXPIRE', set, ttl_ms)
  redis.call('PEXPIRE', counter, ttl_ms)
end

-- Prunes what has left the window and adds `cost` members scored now, named after this
-- admission's number (the counter's next value), which it returns: a settlement later finds
-- exactly this admission's members by it.
local function window_spend(set, counter, window, cost, expired)
  if expired > 0 then
    redis.call('ZREMRANGEBYSCORE', set, '-inf', string.format('%.0f', now - window))
  end
  -- INCRBY, not INCR: the ACL that earlier versions documented stays enough for admissions.
  local id = redis.call('INCRBY', counter, 1)
  window_members('ZADD', set, string.format('%.0f', now), id, 1, cost)
  window_expire(set, counter, window)
  return id
end

-- Settles the admission `id` at `at` from `was` to `is` units: forgets its members above `is`,
-- or adds members up to `is` at the admission's own time (above the limit if need be: later
-- admissions then wait until they leave), while the window holds at most twice its `limit`
-- (as the engine's windows). Nothing once the admission has left the window.
local function window_settle(set, counter, window, limit, at, id, was, is)
  if at + window <= now then
    return
  end
  local score = string.format('%.0f', at)
  if is < was then
    window_members('ZREM', set, score, id, is + 1, was)
  elseif is > was then
    local horizon = string.format('%.0f', now - window)
    local live = redis.call('ZCARD', set) - redis.call('ZCOUNT', set, '-inf', horizon)
    local room = 2 * limit - live
    if room < is - was then
      is = was + math.max(room, 0)
    end
    if is > was then
      window_members('ZADD', set, score, id, was + 1, is)
      window_expire(set, counter, window)
    end
  end
end
