-- Hold a lock longer: its TTL moves only while the owner still holds it. Returns 1, or 0
-- when the lock lapsed or another holds it.
local lock = KEYS[1]
local owner = ARGV[1]
local ttl_ms = ARGV[2]
if redis.call('GET', lock) ~= owner then return 0 end
redis.call('PEXPIRE', lock, ttl_ms)
return 1
