-- Shared by the scripts that may meet a short record (a prelude, not run
-- alone).  A call whose one write made its record leaves it short: a
-- string of that write's fields, "<field> <length> <value>\n" each, set
-- with its expiry in one SET (ngx_http_idem_redis_record.c).  short(s,
-- out) appends a short record's fields to out; hash() makes KEYS[1], if
-- it is a short record, the hash it stands for, its expiry kept.
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
  redis.call('HSET', k, unpack(f))
  if ttl > 0 then redis.call('PEXPIRE', k, ttl) end
end
