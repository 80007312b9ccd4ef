-- Move an ownerless leased run's deadline to `deadline`; 1, else 0 (owned, or not leased).
local run = KEYS[1]
local leases = KEYS[2]
local deadline = ARGV[1]
local run_id = ARGV[2]
if redis.call('HGET', run, 'owner') ~= '' then return 0 end
if not redis.call('ZSCORE', leases, run_id) then return 0 end
redis.call('ZADD', leases, deadline, run_id)
return 1
