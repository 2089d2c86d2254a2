-- The hub's leader lease: taken when free (a new term), renewed by its holder.
-- KEYS[1] the lease (holder's node id), KEYS[2] the term; ARGV[1] this node,
-- ARGV[2] the lease in ms. Returns the holder's term, or 0 when another node holds
-- it. Terms never go back, even when Redis lost its data (a restart without
-- persistence, an eviction): a new term is at least Redis's clock in ms. A stored
-- term more than an hour ahead of that clock was not made here (a stray write):
-- it is forgotten, or followers would refuse every later leader's boards.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holder = redis.call('GET', KEYS[1])
local term = tonumber(redis.call('GET', KEYS[2]) or 0) or 0
if term > now + 3600000 then
  term = 0
  redis.call('SET', KEYS[2], 0)
end
if not holder then
  term = math.max(term + 1, now)
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('SET', KEYS[2], string.format('%d', term))
  return term
end
if holder == ARGV[1] then
  if term == 0 then
    term = now
    redis.call('SET', KEYS[2], string.format('%d', term))
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return term
end
return 0
