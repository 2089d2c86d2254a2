-- The Retry-After pauses of the upstream instances, kept for the fleet on Redis's
-- clock: the sorted set KEYS[1] holds each paused instance scored by the end of its
-- pause. With ARGV[1] (an instance) and ARGV[2] (ms), that instance's pause is
-- extended to at least that long (never shortened). Pauses over are dropped (an
-- empty set is no key at all). Returns every pause still running as a flat list:
-- instance, ms left, instance, ms left...
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[1] then
  local ends = now + tonumber(ARGV[2])
  local current = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or 0)
  if ends > current then
    redis.call('ZADD', KEYS[1], ends, ARGV[1])
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local running = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local left = {}
for i = 1, #running, 2 do
  left[#left + 1] = running[i]
  left[#left + 1] = tonumber(running[i + 1]) - now
end
return left
