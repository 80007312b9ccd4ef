-- Apply one charge unless its mark exists: add each (field, count) pair to the day, month and
-- total hashes and note the tenant. The mark and the sums are one step, so a charge is never
-- half applied nor applied twice. Returns 1 when applied, 0 when it was applied before.
local mark = KEYS[1]       -- the charge's mark (SET NX with a TTL)
local tenants = KEYS[5]    -- the set of tenants with usage
local ttl_s = ARGV[1]      -- how long the mark is kept
local tenant = ARGV[2]
-- KEYS[2..4]: the day, month and total hashes; ARGV[3..]: field, count pairs
if not redis.call('SET', mark, '1', 'NX', 'EX', ttl_s) then return 0 end
redis.call('SADD', tenants, tenant)
for i = 3, #ARGV, 2 do
  local n = tonumber(ARGV[i + 1])
  if n ~= 0 then
    for k = 2, 4 do redis.call('HINCRBY', KEYS[k], ARGV[i], n) end
  end
end
return 1
