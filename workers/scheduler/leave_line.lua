-- The job leaves its session's line (and the line leaves the set of lines once empty);
-- returns the job now at its head, or false.
local line = KEYS[1]
local lines = KEYS[2]
local job_id = ARGV[1]
redis.call('LREM', line, 0, job_id)
local head = redis.call('LINDEX', line, 0)
if not head then redis.call('SREM', lines, line) end
return head
