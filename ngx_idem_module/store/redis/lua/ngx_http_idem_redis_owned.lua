-- The final write of an execution whose claim got no answer (a timeout,
-- an error, a request ended while it was out): the claim may have been
-- made, and then this write releases it, or another execution holds the
-- call, and then nothing is written, so that the record stays that
-- owner's.  The claim is this execution's when "o" names its token.
-- KEYS[1]: the record; ARGV: token, ttl (ms, "0": the expiry left as it
-- is), then the fields, field and value each.  Replies as the HSET (the
-- fields that were new), or -1 when nothing was written.
local k = KEYS[1]
-- a claim made short (ngx_http_idem_redis_record.c): the hash first
hash()
if redis.call('TYPE', k).ok ~= 'hash'
    or redis.call('HGET', k, 'o') ~= ARGV[1] then
  return -1
end
local n = redis.call('HSET', k, unpack(ARGV, 3))
if ARGV[2] ~= '0' then redis.call('PEXPIRE', k, ARGV[2]) end
return n
