-- Take a tenant's search slots for one search, if enough are free (api/search_slots.py).
-- KEYS[1]: the tenant's running searches, a sorted set of "token:slots" -> lapse time (ms)
-- ARGV[1]: now (ms)  ARGV[2]: this search's lapse time (ms)  ARGV[3]: its "token:slots"
-- ARGV[4]: the slots this search takes  ARGV[5]: the tenant's slots
-- Returns 1 when taken, 0 when too few are free. A search that takes more slots than the
-- tenant has runs when nothing else of the tenant runs.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local held = 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  held = held + tonumber(string.match(member, ':(%d+)$'))
end
if held > 0 and held + tonumber(ARGV[4]) > tonumber(ARGV[5]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) - tonumber(ARGV[1])))
return 1
