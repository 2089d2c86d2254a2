-- The fleet's budget: GCRA on Redis's clock, in microseconds. KEYS[1] the
-- theoretical arrival time; ARGV[1] the interval between permits, ARGV[2] how far
-- ahead of that schedule one may be taken (the burst). Returns 0 when a permit is
-- granted, else how many microseconds until one may be.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local allow_at = tat - tolerance
if now < allow_at then return allow_at - now end
local next_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%d', next_tat), 'PX', math.ceil((next_tat - now) / 1000) + 1000)
return 0
