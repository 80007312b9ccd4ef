-- `phase`'s message is in the broker: an ownerless run at that phase waits for a worker to
-- claim it until `pickup_by`. 1, else 0.
local run = KEYS[1]
local leases = KEYS[2]
local phase = ARGV[1]
local run_id = ARGV[2]
local pickup_by = ARGV[3]
if redis.call('HGET', run, 'phase') ~= phase then return 0 end
if redis.call('HGET', run, 'owner') ~= '' then return 0 end
redis.call('ZADD', leases, pickup_by, run_id)
return 1
