-- Forget the run if `token` owns it ('*': whoever owns it); 1, else 0.
local run = KEYS[1]
local leases = KEYS[2]
local token = ARGV[1]
local run_id = ARGV[2]
if token ~= '*' and redis.call('HGET', run, 'owner') ~= token then return 0 end
redis.call('DEL', run)
redis.call('ZREM', leases, run_id)
return 1
