-- Shared by the scripts that may meet a short record (a prelude, not run
-- alone).  A call whose one write made its record leaves it short: a
-- string of that write's fields, "<field> <length> <value>\n" each, set
-- with its expiry in one SET (ngx_http_idem_redis_record.c).  short(s,
-- out) appends a short record's fields to out; hash() makes KEYS[1], if
-- it is a short record, the hash it stands for, its expiry kept and its
-- leases and bounds in Redis's time.
local function short(s, out)
  local i = 1
  while i <= #s do
    local f, n, j = string.match(s, '^(%S+) (%d+) ()', i)
    if not f then break end
    n = tonumber(n)
    out[#out + 1] = f
    out[#out + 1] = string.sub(s, j, j + n - 1)
    i = j + n + 1
  end
  return out
end
local function hash()
  local k = KEYS[1]
  if redis.call('TYPE', k).ok ~= 'string' then return end
  local f = short(redis.call('GET', k), {})
  local ttl = redis.call('PTTL', k)
  redis.call('DEL', k)
  if #f == 0 then return end
  -- a lease or bound relative to the expiry ("+<ms> <ttl>") becomes
  -- Redis's time: the hash's expiry moves with later writes (an owner's
  -- final PEXPIRE may land before its fields), which must not move it
  local now
  for i = 1, #f - 1, 2 do
    local c = string.sub(f[i], 1, 2)
    local ms, at = string.match(f[i + 1], '^%+(%d+) (%d+)$')
    if ms and (c == 'l:' or c == 'b:') then
      if not now then
        local t = redis.call('TIME')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      end
      f[i + 1] = string.format('%.0f', now + tonumber(ms)
                               - math.max(tonumber(at) - math.max(ttl, 0), 0))
    end
  end
  redis.call('HSET', k, unpack(f))
  if ttl > 0 then redis.call('PEXPIRE', k, ttl) end
end
