-- Shared by the claim and the record read (a prelude, not run alone).
-- now: Redis's clock, unix ms.  fields(out, o): appends the record's
-- fields to out, all but the stored answer "r" (never read here: it may
-- be large).  A claim made without a script keeps its lease in a key of
-- its own, "<KEYS[1]>:lease" (PX lease, holding the owner's token; in the
-- record's slot, and not a key of the call: a script of two keys fails
-- while a cluster migrates their slot); fields() shows
-- it as "l:<owner>" the way a script's claim writes it: Redis's time when
-- it lapses.  A record holds about idem_record_max_executions executions;
-- one of an older version may hold more, hence HMGET in chunks (Lua's
-- unpack() has a limit).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_key = KEYS[1] .. ':lease'
local function lease_left(o)
  if o and redis.call('GET', lease_key) == o then
    return redis.call('PTTL', lease_key)
  end
  return -1
end
local function fields(out)
  local ks, some, o = redis.call('HKEYS', KEYS[1]), {}, nil
  for i = 1, #ks + 1 do
    if #some == 1000 or (i > #ks and #some > 0) then
      local vs = redis.call('HMGET', KEYS[1], unpack(some))
      for j = 1, #some do
        out[#out + 1] = some[j]
        out[#out + 1] = vs[j]
        if some[j] == 'o' then o = vs[j] end
      end
      some = {}
    end
    if i <= #ks and ks[i] ~= 'r' then some[#some + 1] = ks[i] end
  end
  if o and redis.call('HEXISTS', KEYS[1], 'k:' .. o) == 0
     and redis.call('HEXISTS', KEYS[1], 'l:' .. o) == 0 then
    out[#out + 1] = 'l:' .. o
    out[#out + 1] = string.format('%.0f', now + math.max(lease_left(o), 0))
  end
  return out
end
