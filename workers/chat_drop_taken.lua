-- Drop the events a flush submitted, keep any that came in meanwhile; returns how many are
-- left (more than 0: another flush must follow).
local events = KEYS[1]     -- the conversation's buffered events (a list, oldest first)
local scheduled = KEYS[2]  -- the mark that a flush is scheduled
local taken = ARGV[1]      -- how many events the flush submitted
redis.call('LTRIM', events, tonumber(taken), -1)
local left = redis.call('LLEN', events)
if left == 0 then redis.call('DEL', scheduled) end
return left
