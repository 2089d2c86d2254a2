-- A node's heartbeat on Redis's clock (one clock for every node): marks the node
-- ARGV[1] alive in the sorted set KEYS[1], forgets nodes silent for ARGV[2] ms,
-- and returns how many are left.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now - tonumber(ARGV[2]))
return redis.call('ZCARD', KEYS[1])
