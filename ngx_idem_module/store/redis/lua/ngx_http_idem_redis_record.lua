-- Shared by the claim, the resolution and the record read (a prelude,
-- not run alone; the short prelude goes before it).
-- now: Redis's clock, unix ms.  lease_at(v): when a claim's lease ("l:")
-- lapses, Redis's clock: a script's claim writes it so; a claim made
-- without a script (no clock) writes "+<lease> <ttl>" with the PEXPIRE
-- that set the record's expiry to <ttl>: it lapses <lease> ms after that,
-- which the record's PTTL tells (a later refresh of the expiry only makes
-- the lease longer).  answers(v): below.  fields(out): appends the
-- record's fields to out, leases (and bounds) as lease_at() reads them,
-- all but the stored answer "r" (never read here: it may be large), a
-- short record's too.  A record holds about
-- idem_record_max_executions executions; one of an older version may hold
-- more, hence HMGET in chunks (Lua's unpack() has a limit).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function lease_at(v)
  local lease, ttl = string.match(v, '^%+(%d+) (%d+)$')
  if not lease then return tonumber(v) or 0 end
  local left = math.max(redis.call('PTTL', KEYS[1]), 0)
  return now + tonumber(lease) - math.max(tonumber(ttl) - left, 0)
end
-- answers(v): whether the owner of an execution whose claim carries
-- the bound v ("b:", written with its lease, in the lease's forms) may
-- still answer: until the bound passes; always for "-" (no deadline, or
-- still running at it) and for none (nil: a claim of 0.6.0, or one whose
-- rest never landed: nothing tells how long its owner runs).
local function answers(v)
  if not v or v == '-' then return true end
  return lease_at(v) > now
end
local function fields(out)
  if redis.call('TYPE', KEYS[1]).ok == 'string' then
    -- a short claim's leases are relative to its expiry; no stored answer
    local f = short(redis.call('GET', KEYS[1]), {})
    for i = 1, #f - 1, 2 do
      local c, v = string.sub(f[i], 1, 2), f[i + 1]
      if c == 'l:' or (c == 'b:' and v ~= '-') then
        v = string.format('%.0f', lease_at(v))
      end
      if f[i] ~= 'r' then
        out[#out + 1] = f[i]
        out[#out + 1] = v
      end
    end
    return out
  end
  local ks, some = redis.call('HKEYS', KEYS[1]), {}
  for i = 1, #ks + 1 do
    if #some == 1000 or (i > #ks and #some > 0) then
      local vs = redis.call('HMGET', KEYS[1], unpack(some))
      for j = 1, #some do
        local v = vs[j]
        local c = string.sub(some[j], 1, 2)
        if (c == 'l:' or (c == 'b:' and v ~= '-')) and v then
          v = string.format('%.0f', lease_at(v))
        end
        out[#out + 1] = some[j]
        out[#out + 1] = v
      end
      some = {}
    end
    if i <= #ks and ks[i] ~= 'r' then some[#some + 1] = ks[i] end
  end
  return out
end
