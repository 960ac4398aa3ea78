-- A resolution of a call's latest execution, with the short and record
-- preludes before it (POST to the status endpoint, idem_status
-- resolve=on).  KEYS[1]: the record; ARGV: outcome ("applied" or
-- "not_applied"), receipt ("-": none), by ("-": none), "force" or "-".
-- The latest execution (by arrival, as the status endpoint orders them)
-- must have ended UNKNOWN, or hold a claim that has lapsed, and not be
-- resolved yet: then "z:<token>" = "<outcome> <now> <receipt> <by>" is
-- written, once, and the reply is {"resolved", now, the record's
-- fields}; else {"none"} (no record, or no execution in it), {"conflict",
-- its state or "RESOLVED"}, or {"early", ms left or "-"}: a lapsed claim
-- whose owner may still answer (its bound "b:" has not passed, or there
-- is none to pass: "-"), which only its final write or its bound
-- settles.  A lapsed lease is no proof that the owner has gone: it may be
-- waiting for the upstream, whose answer would then come after the
-- resolution.  "force" is an operator's word that the owner's gateway is
-- gone: a lapsed claim with no final write is resolved whatever its
-- bound says, and " forced" ends the value; an execution with a final
-- write is never forced: {"final", its state}.
-- One script: a second resolver, or the owner's late final write, comes
-- before or after it, never between; a final write after it wins where
-- it says how the upstream answered (claim.lua, record_parse.c).
local k = KEYS[1]
if redis.call('EXISTS', k) == 0 then return {'none'} end
hash()
local h = redis.call('HGETALL', k)
local ex = {}
for i = 1, #h, 2 do
  local c, t = string.match(h[i], '^([eflzb]):([^:]+)$')
  if c then
    ex[t] = ex[t] or {t = t}
    ex[t][c] = h[i + 1]
  end
end
local last
for t, e in pairs(ex) do
  local c
  if e.f then
    c = string.match(e.f, '^%S+ %S+ %S+ (%d+)')
  elseif e.e then
    c = string.match(e.e, '^%S+ (%d+)')
  end
  c = tonumber(c)
  if c and (not last or c > last.c or (c == last.c and t > last.t)) then
    e.c = c
    last = e
  end
end
if not last then return {'none'} end
if last.z then return {'conflict', 'RESOLVED'} end
local force = ARGV[4] == 'force'
if force and last.f then return {'final', string.match(last.f, '^(%S+)')} end
local state
if last.f then
  state = string.match(last.f, '^(%S+)')
elseif last.l and lease_at(last.l) <= now then
  state = 'UNKNOWN'
elseif last.e and string.sub(last.e, 1, 1) == 'P' then
  state = 'PROCESSING'
else
  state = 'RECEIVED'
end
if state ~= 'UNKNOWN' then return {'conflict', state} end
if not last.f and not force and answers(last.b) then
  if not last.b or last.b == '-' then return {'early', '-'} end
  return {'early', string.format('%.0f', lease_at(last.b) - now)}
end
-- a fifth word: a reader that knows four takes it as part of "by"
redis.call('HSET', k, 'z:' .. last.t, string.format('%s %.0f %s %s%s',
  ARGV[1], now, ARGV[2], ARGV[3], force and ' forced' or ''))
-- "z:" is of record format 1 (NGX_HTTP_IDEM_RECORD_VERSION): a record
-- made by a gateway of format 0 (no "v") says so from now on; never lowered
if (tonumber(redis.call('HGET', k, 'v')) or 0) < 1 then
  redis.call('HSET', k, 'v', '1')
end
return fields({'resolved', string.format('%.0f', now)})
