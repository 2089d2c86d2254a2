-- One request counted against an upstream instance's vendor quotas, for the fleet.
-- KEYS[1] this minute's count, KEYS[2] this vendor day's (each key names its period,
-- so a node whose clock is a little off counts into the right one); ARGV: the
-- minute quota, the day quota (0: none), the day's reserve kept for clients, 1 for
-- a client's request, then how long each key is kept (past its period's end).
-- Returns {verdict, this minute, today}: 0 counted, 1 the minute is spent, 2 the
-- day is spent, 3 background work steps back for the reserve.
local minute = tonumber(redis.call('GET', KEYS[1]) or 0)
local day = tonumber(redis.call('GET', KEYS[2]) or 0)
local per_minute, per_day = tonumber(ARGV[1]), tonumber(ARGV[2])
local reserve, client = tonumber(ARGV[3]), ARGV[4] == '1'
if per_day > 0 then
  if day >= per_day then return {2, minute, day} end
  if not client and per_day - day <= reserve then return {3, minute, day} end
end
if per_minute > 0 and minute >= per_minute then return {1, minute, day} end
minute = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
day = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return {0, minute, day}
