-- The claim of a call id, its common path: a new call id, whose claim
-- makes its record, in one script, first, with its own clock: a new id
-- runs none of the preludes' definitions (the short and record preludes
-- and the claim script's rare paths come after it:
-- ngx_http_idem_redis_record.c).  What a script costs Redis grows with
-- what it runs (docs/performance.md).
-- KEYS[1]: the record; ARGV: token, digest, lease (ms), ttl (ms),
-- arrival, bound (how long the owner may answer, ms; "-": no bound).
-- Replies {"claimed", "1"}: the claim made the record, whose first
-- execution its owner is (not counted, as a record holds its first);
-- else the claim script's answer ({"claimed"}: made over a record there
-- before it, whose owner counts its execution).  What a claim writes is
-- one write: a duplicate never meets "o" without the rest of the claim.
-- The lease and the bound are Redis's clock, unix ms, as every build
-- reads them (docs/install.md).
if redis.call('EXISTS', KEYS[1]) == 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local b = ARGV[6] or '-'
  if b ~= '-' then b = string.format('%.0f', now + tonumber(b)) end
  redis.call('HSET', KEYS[1], 'o', ARGV[1], 'd', ARGV[2],
    'l:' .. ARGV[1], string.format('%.0f', now + tonumber(ARGV[3])),
    'b:' .. ARGV[1], b, 'e:' .. ARGV[1], ARGV[5], 'v', '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {'claimed', '1'}
end
