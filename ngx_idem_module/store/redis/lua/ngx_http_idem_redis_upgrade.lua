-- A record's command that met a short record (WRONGTYPE), or a short
-- record's SET that met a record there already (NX): with the short
-- prelude before it.  KEYS[1]: the record; ARGV: the command, then its
-- arguments after the key.  The record becomes a hash, then the command
-- runs and its reply is the script's; a SET (ARGV: SET, value, PX, ttl,
-- NX) runs as the write to a hash it stands for: HSET of its fields,
-- PEXPIRE, and replies as that HSET; an APPEND (ARGV: APPEND, fields in
-- the short form: an owner's write to its short claim) that met the
-- hash the record became runs as HSET of those fields.
local cmd = ARGV[1]
hash()
if cmd == 'SET' then
  local n = redis.call('HSET', KEYS[1], unpack(short(ARGV[2], {})))
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return n
end
if cmd == 'APPEND' then
  local f = short(ARGV[2], {})
  if #f == 0 then return 0 end
  return redis.call('HSET', KEYS[1], unpack(f))
end
if cmd ~= 'HSET' and cmd ~= 'HINCRBY' then
  return redis.error_reply('ERR not a record command: ' .. cmd)
end
return redis.call(cmd, KEYS[1], unpack(ARGV, 2))
