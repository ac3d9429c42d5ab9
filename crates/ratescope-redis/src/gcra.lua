-- Token bucket as GCRA, checked and spent in two steps so several budgets can decide together.
--
-- State: one key holding the theoretical arrival time (TAT), microseconds on the Redis clock.
-- `per` is microseconds per token, `capacity` the burst (tau = capacity * per). Every number
-- stays an integer below 2^53, so Lua's doubles hold it exactly.

-- Returns allowed, remaining tokens, retry-after in microseconds, and the TAT to write if spent.
local function gcra_check(key, per, capacity, cost)
  local tau = per * capacity
  local tat = tonumber(redis.call('GET', key) or now) or now
  if tat < now then
    tat = now
  end
  local new_tat = tat + cost * per
  local allow_at = new_tat - tau
  if allow_at > now then
    local remaining = math.floor((tau - (tat - now)) / per)
    if remaining < 0 then
      remaining = 0
    end
    return false, remaining, allow_at - now, nil
  end
  return true, math.floor((tau - (new_tat - now)) / per), 0, new_tat
end

-- Writes the new TAT; the key lives until the bucket is full again (a missing key means full).
local function gcra_spend(key, new_tat)
  local ttl_ms = math.ceil((new_tat - now) / 1000)
  if ttl_ms < 1 then
    ttl_ms = 1
  end
  redis.call('SET', key, string.format('%.0f', new_tat), 'PX', string.format('%.0f', ttl_ms))
end

-- Settles `was` tokens spent into `is`: less moves the TAT back by the difference, never below
-- now (a full bucket holds no more); more moves it forward, beyond the burst if need be (a
-- debt that delays the next admissions until it is paid), but never more than one `capacity`
-- in debt (a deeper debt already there is kept), as the engine's buckets.
local function gcra_settle(key, per, capacity, was, is)
  local stored = tonumber(redis.call('GET', key) or now) or now
  local tat = stored
  if tat < now then
    tat = now
  end
  if is < was then
    if stored <= now then
      return
    end
    tat = tat - (was - is) * per
    if tat < now then
      -- Full again: a TAT of now means the same as no key (and needs no DEL in the ACL).
      tat = now
    end
  elseif is > was then
    tat = math.min(tat + (is - was) * per, math.max(now + 2 * capacity * per, stored))
  else
    return
  end
  gcra_spend(key, tat)
end
