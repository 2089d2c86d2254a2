-- A Retry-After pause of one upstream instance, kept for the fleet: KEYS[1] lives
-- as long as the pause (ARGV[1] ms), only ever extended. Returns the ms left.
local left = redis.call('PTTL', KEYS[1])
local wait = tonumber(ARGV[1])
if left < wait then
  redis.call('SET', KEYS[1], '1', 'PX', wait)
  return wait
end
return left
