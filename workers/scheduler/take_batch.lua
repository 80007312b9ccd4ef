-- Take up to `limit` ready jobs (from the lane's list `ready`) into `batch` (kept, so a
-- redelivered gather finds the same jobs); false once the batch was launched (`launched` exists),
-- so a late redelivery takes nothing. A new batch starts only while fewer than `slots` batches of
-- the lane are in flight (`in_flight`, scored by start time; entries scored before `lost_before`
-- are dropped as lost); otherwise the ready jobs wait, the reply is -1, and the next batch to end
-- takes them. With `spread` '1', a batch takes at most its share of the lane's jobs (ready, and in
-- its other batches in flight: `batch_prefix` .. their id) over the `slots`, and at least
-- `spread_from`. Returns the batch's jobs.
local batch = KEYS[1]
local ready = KEYS[2]
local launched = KEYS[3]
local in_flight = KEYS[4]
local limit = ARGV[1]
local ttl_s = ARGV[2]
local slots = ARGV[3]
local now = ARGV[4]
local lost_before = ARGV[5]
local batch_id = ARGV[6]
local batch_prefix = ARGV[7]
local spread_from = ARGV[8]
local spread = ARGV[9]
if redis.call('EXISTS', launched) == 1 then return false end
local members = redis.call('LRANGE', batch, 0, -1)
if #members == 0 then
  if redis.call('LLEN', ready) == 0 then return {} end
  redis.call('ZREMRANGEBYSCORE', in_flight, '-inf', lost_before)
  if redis.call('ZCARD', in_flight) >= tonumber(slots) then return -1 end
end
local want = tonumber(limit) - #members
if want > 0 and spread == '1' and tonumber(slots) > 1 then
  local others = 0
  for _, id in ipairs(redis.call('ZRANGE', in_flight, 0, -1)) do
    if id ~= batch_id then others = others + redis.call('LLEN', batch_prefix .. id) end
  end
  local in_lane = redis.call('LLEN', ready) + others + #members
  local share = math.max(tonumber(spread_from), math.ceil(in_lane / tonumber(slots)))
  if share - #members < want then want = share - #members end
end
if want > 0 then
  local got = redis.call('LPOP', ready, want)
  if got then
    for _, id in ipairs(got) do
      redis.call('RPUSH', batch, id)
      table.insert(members, id)
    end
    redis.call('EXPIRE', batch, ttl_s)
    redis.call('ZADD', in_flight, now, batch_id)
  end
end
return members
