-- The claim's rare paths, after the take script (its common path) found
-- the record there already (ngx_http_idem_redis_record.c), with the take
-- script, then the short and record preludes before it.
-- KEYS[1]: the record; ARGV: token, digest, lease (ms), ttl (ms),
-- arrival, bound (how long the owner may answer, ms; "-": no bound).
-- Replies {"claimed"}, {"mismatch"}, {"inflight", ms left}, {"replay",
-- answer}, or {"large" | "unknown" | "applied", now, the record's
-- fields}, each but "claimed" and "mismatch" followed by the record's
-- PTTL (until when the id is known).  A claim lapses by Redis's clock,
-- so that gateways need not agree on the time; its owner's final write
-- applies whenever it comes.  An owner's execution resolved (resolve.lua)
-- is what its resolution says: applied, never run again; not applied,
-- released, unless its owner's final write, come after the resolution,
-- says the upstream answered (kept "R" or "L": that wins, the call is
-- never run twice), or it has none yet and its owner may still answer
-- (resolve.lua takes none so, unless forced: an operator's word that the
-- owner is gone, which releases it; a 0.6.0 build with resolutions may).
local k = KEYS[1]
-- A short record (a claim made short, or an execution before, written
-- whole) is read as it is, so that its owner's writes still add to the
-- string (ngx_http_idem_redis_record.c); it becomes the hash only where
-- this script writes.  get(): HMGET's reply, from either form.
local rec
if redis.call('TYPE', k).ok == 'string' then
  local f = short(redis.call('GET', k), {})
  rec = {}
  for i = 1, #f - 1, 2 do rec[f[i]] = f[i + 1] end
end
local function get(...)
  if not rec then return redis.call('HMGET', k, ...) end
  local out = {}
  for i, n in ipairs({...}) do out[i] = rec[n] or false end
  return out
end
local function ttl(t)
  t[#t + 1] = string.format('%d', redis.call('PTTL', k))
  return t
end
local function record(v)
  return ttl(fields({v, string.format('%.0f', now)}))
end
local v = get('d', 'o')
local o = v[2]
if o then
  if v[1] and v[1] ~= ARGV[2] then return {'mismatch'} end
  local w = get('k:' .. o, 'l:' .. o, 'z:' .. o, 'b:' .. o)
  local s = w[1]
  if w[3] then
    if string.match(w[3], '^applied ') then return record('applied') end
    if s ~= 'R' and s ~= 'L' and (s or not answers(w[4])
        or string.match(w[3], '^%S+ %S+ %S+ %S+ forced$')) then
      s = 'F'
    end
  end
  if not s then
    local left = 0
    if w[2] then
      left = lease_at(w[2]) - now
    elseif not v[1] then
      -- its owner is writing the rest of its claim right now, or died
      -- doing so: the lease starts here, so that the claim lapses
      hash()
      redis.call('HSET', k, 'l:' .. o,
        string.format('%.0f', now + tonumber(ARGV[3])))
      left = tonumber(ARGV[3])
    end
    if left > 0 then
      return ttl({'inflight', string.format('%.0f', left)})
    end
    return record('unknown')
  end
  if s == 'R' then return ttl({'replay', get('r')[1]}) end
  if s == 'L' then return record('large') end
  if s ~= 'F' then return record('unknown') end
end
-- 'v': NGX_HTTP_IDEM_RECORD_VERSION (ngx_http_idem_record.h), as this may
-- be the write that makes the record
local b = ARGV[6] or '-'
if b ~= '-' then b = string.format('%.0f', now + tonumber(b)) end
hash()
redis.call('HSET', k, 'd', ARGV[2], 'o', ARGV[1],
  'l:' .. ARGV[1], string.format('%.0f', now + tonumber(ARGV[3])),
  'b:' .. ARGV[1], b, 'e:' .. ARGV[1], ARGV[5], 'v', '1')
redis.call('PEXPIRE', k, ARGV[4])
return {'claimed'}
