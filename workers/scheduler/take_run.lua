-- Remove the run if its lease expired at or before `before`, for exactly one caller; returns
-- its fields (HGETALL), or false.
local run = KEYS[1]
local leases = KEYS[2]
local before = ARGV[1]
local run_id = ARGV[2]
local score = redis.call('ZSCORE', leases, run_id)
if (not score) or tonumber(score) > tonumber(before) then return false end
redis.call('ZREM', leases, run_id)
local fields = redis.call('HGETALL', run)
redis.call('DEL', run)
return fields
