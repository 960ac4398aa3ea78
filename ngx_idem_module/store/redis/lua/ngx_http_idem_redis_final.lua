-- An execution's final write, when it owns its call's claim: its fields
-- and the record's expiry in one command, and its waiters told.
-- KEYS[1]: the record; ARGV: ttl (ms, "0": the expiry left as it is),
-- the fields, field and value each, then a pub/sub channel ("": none),
-- on which the record's key is published once the write is in.  Replies
-- as the HSET (the fields that were new).  The short prelude goes before
-- it: a short record there (a rare race: WRONGTYPE) becomes the hash
-- first.
local k = KEYS[1]
local ch = ARGV[#ARGV]
local n = redis.pcall('HSET', k, unpack(ARGV, 2, #ARGV - 1))
if type(n) == 'table' and n.err then
  hash()
  n = redis.call('HSET', k, unpack(ARGV, 2, #ARGV - 1))
end
if ARGV[1] ~= '0' then redis.call('PEXPIRE', k, ARGV[1]) end
if ch ~= '' then redis.call('PUBLISH', ch, k) end
return n
