-- The owner `token` is done: the run waits for `phase`, ownerless; `jobs_json` ('' keeps them)
-- replaces its jobs; leased until `expires`, or not at all when ''. 1, else 0 (not the owner).
local run = KEYS[1]
local leases = KEYS[2]
local token = ARGV[1]
local phase = ARGV[2]
local jobs_json = ARGV[3]
local expires = ARGV[4]
local run_id = ARGV[5]
if redis.call('HGET', run, 'owner') ~= token then return 0 end
redis.call('HSET', run, 'phase', phase, 'owner', '')
if jobs_json ~= '' then redis.call('HSET', run, 'jobs', jobs_json) end
if expires == '' then redis.call('ZREM', leases, run_id)
else redis.call('ZADD', leases, expires, run_id) end
return 1
