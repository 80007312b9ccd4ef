-- Take one of a tenant's search slots, if one is free (api/search_slots.py).
-- KEYS[1]: the tenant's running searches, a sorted set of token -> lapse time (ms)
-- ARGV[1]: now (ms)  ARGV[2]: this search's lapse time (ms)  ARGV[3]: its token
-- ARGV[4]: how many searches the tenant may have running
-- Returns 1 when taken, 0 when every slot is held.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) - tonumber(ARGV[1])))
return 1
