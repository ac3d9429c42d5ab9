-- Shared prelude of every decision script: `now` in microseconds on the Redis clock.
-- Replicating effects (not the script) lets a script that read TIME write afterwards on
-- Redis versions older than 5.

if redis.replicate_commands then
  redis.replicate_commands()
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
