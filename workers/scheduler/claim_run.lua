-- Take the run's `phase` for the execution `token` of the task `task_id` until `expires`.
-- A gather (`may_create` '1') may create its run and take over from an earlier delivery of
-- itself. Returns 'own', 'stale' (gone, elsewhere, or another owner) or 'redelivered' (an earlier
-- delivery of this very task owns it: its worker died).
local run = KEYS[1]
local leases = KEYS[2]
local phase = ARGV[1]
local task_id = ARGV[2]
local token = ARGV[3]
local expires = ARGV[4]
local run_id = ARGV[5]
local may_create = ARGV[6]
local lane = ARGV[7]
local ttl_s = ARGV[8]
local current = redis.call('HGET', run, 'phase')
if not current then
  if may_create ~= '1' then return 'stale' end
  redis.call('HSET', run, 'phase', phase, 'owner', token, 'lane', lane, 'jobs', '[]')
  redis.call('EXPIRE', run, ttl_s)
  redis.call('ZADD', leases, expires, run_id)
  return 'own'
end
if current ~= phase then return 'stale' end
local owner = redis.call('HGET', run, 'owner') or ''
local mine = string.sub(owner, 1, #task_id + 1) == task_id .. ':'
if owner == '' or (mine and may_create == '1') then
  redis.call('HSET', run, 'owner', token)
  redis.call('ZADD', leases, expires, run_id)
  return 'own'
end
if mine then return 'redelivered' end
return 'stale'
