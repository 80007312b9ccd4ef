-- The job's state and its place in its session's line, in one step: a job with a state is in
-- its line (until it ends). A job already in the line keeps its place (an intake finished twice).
-- Returns 1 when the job heads the line, else 0.
local state = KEYS[1]
local line = KEYS[2]
local accepted = KEYS[3]
local lines = KEYS[4]
local job_id = ARGV[1]
local state_json = ARGV[2]
local ttl_s = ARGV[3]
local accepted_at = ARGV[4]
redis.call('SET', state, state_json, 'EX', ttl_s)
if not redis.call('LPOS', line, job_id) then
  redis.call('RPUSH', line, job_id)
  redis.call('SET', accepted, accepted_at, 'EX', ttl_s)
end
redis.call('EXPIRE', line, ttl_s)
redis.call('SADD', lines, line)
if redis.call('LINDEX', line, 0) == job_id then return 1 end
return 0
