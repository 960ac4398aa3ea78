-- Trims a record to the newest executions.  KEYS[1]: the record;
-- ARGV[1]: idem_record_max_executions.  Keeps the newest ARGV[1]
-- executions, folds the others into "x" and deletes their fields, and
-- fields of no execution, but for the fields of the execution named by
-- "o" that the dedupe claim reads: its "l:", "k:", bound "b:" and
-- resolution "z:"
-- (folded into "x" all the same: a resend is still answered as resolved,
-- and a "z:" a trim of 0.6.0 left without its execution stays one the
-- claim reads); sets "n" to the executions kept after the first.
-- Replies how many executions were dropped.  The hash is about the cap
-- when this runs (a record of an older version aside, hence the chunks:
-- Lua's unpack() has a limit).  The short prelude goes before it: a
-- record trimmed is one counted, a hash, unless it went and came back
-- short since its count.
local k, max = KEYS[1], tonumber(ARGV[1])
hash()
local h = redis.call('HGETALL', k)
local ex, list, gone, claim = {}, {}, {}, {}
local o = redis.call('HGET', k, 'o')
if o then
  claim['l:' .. o] = true
  claim['k:' .. o] = true
  claim['b:' .. o] = true
  claim['z:' .. o] = true
end
local function drop(e)
  for _, f in ipairs(e.fields) do
    if not claim[f] then gone[#gone + 1] = f end
  end
end
for i = 1, #h, 2 do
  local f, v = h[i], h[i + 1]
  local c, t = string.match(f, '^([epflkarzb]):([^:]+)')
  if c then
    local e = ex[t]
    if not e then
      e = {t = t, fields = {}}
      ex[t] = e
    end
    e.fields[#e.fields + 1] = f
    e[c] = v
  end
end
for t, e in pairs(ex) do
  local info
  if e.f then
    info = string.match(e.f, '^%S+ %S+ %S+ (.*)$')
  elseif e.e then
    info = string.match(e.e, '^%S+ (.*)$')
  end
  if info then
    e.info = info
    e.c = tonumber(string.match(info, '^(%d+)')) or 0
    list[#list + 1] = e
  else
    drop(e)
  end
end
table.sort(list, function(a, b)
  if a.c ~= b.c then return a.c < b.c end
  return a.t < b.t
end)
local n = #list - max
if n > 0 then
  local s = {0, 0, 0, 0, '-', list[1].info}
  local x = redis.call('HGET', k, 'x')
  if x then
    local p = {string.match(x, '^(%d+) (%d+) (%d+) (%d+) (%S+) (.*)$')}
    if #p == 6 then
      s = {tonumber(p[1]), tonumber(p[2]), tonumber(p[3]), tonumber(p[4]), p[5], p[6]}
    end
  end
  for i = 1, n do
    local e = list[i]
    local st, fs, ms = 'UNKNOWN', nil, e.c
    if e.f then
      st, fs, ms = string.match(e.f, '^(%S+) (%S+) (%d+)')
      ms = tonumber(ms) or e.c
    end
    if e.z and (st == 'UNKNOWN' or not e.f) then
      st = string.match(e.z, '^applied ') and 'SUCCESS' or 'FAILED'
    end
    if e.p then ms = math.max(ms, tonumber(e.p) or 0) end
    s[1] = s[1] + 1
    if st == 'SUCCESS' then s[2] = s[2] + 1 end
    if st == 'UNKNOWN' then s[3] = s[3] + 1 end
    s[4] = math.max(s[4], ms)
    if fs then s[5] = fs end
    drop(e)
  end
  redis.call('HSET', k, 'x', string.format('%.0f %.0f %.0f %.0f %s %s', s[1], s[2], s[3], s[4], s[5], s[6]))
end
for i = 1, #gone, 1000 do
  redis.call('HDEL', k, unpack(gone, i, math.min(i + 999, #gone)))
end
redis.call('HSET', k, 'n', math.max(math.min(#list, max) - 1, 0))
return math.max(n, 0)
