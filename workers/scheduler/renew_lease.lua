-- Move the lease to `expires` while `token` owns the run; 1, else 0.
local run = KEYS[1]
local leases = KEYS[2]
local token = ARGV[1]
local expires = ARGV[2]
local run_id = ARGV[3]
if redis.call('HGET', run, 'owner') ~= token then return 0 end
redis.call('ZADD', leases, 'XX', expires, run_id)
return 1
