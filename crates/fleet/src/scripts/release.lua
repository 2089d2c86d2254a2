-- Gives a fill lease back: compare-and-delete, so a lease that expired and went
-- to another node (KEYS[1] no longer holds this token, ARGV[1]) is not touched.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
