-- A page of a stream, newest first, flat for the C side (a reply's
-- nested arrays are not): Redis's time (unix ms), then for each entry
-- its id, its number of strings, its fields and values.  KEYS[1]: the
-- stream; ARGV[1]: the newest id to include ("+", or "(" and an id:
-- older than that one); ARGV[2]: at most so many entries.  No stream:
-- no entries.
local t = redis.call('TIME')
local out = {string.format('%.0f', tonumber(t[1]) * 1000
                                   + math.floor(tonumber(t[2]) / 1000))}
local es = redis.call('XREVRANGE', KEYS[1], ARGV[1], '-', 'COUNT', ARGV[2])
for i = 1, #es do
  out[#out + 1] = es[i][1]
  out[#out + 1] = tostring(#es[i][2])
  for j = 1, #es[i][2] do out[#out + 1] = es[i][2][j] end
end
return out
