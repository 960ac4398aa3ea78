package IdemRecord;

# A record's fields as the tests look at them, whichever form Redis holds
# it in: a hash, or a short record (a string of "<field> <length>
# <value>\n", one write that made the record; README "Records in
# Redis").  The Lua below reads the string form on its own, stricter than
# the module's reader (each value must end in a newline), so that a test
# sees a short record the module wrote wrong.
#
#   my %f = IdemRecord::fields($port, $key);   # field => value, () if none
#   my $t = IdemRecord::type($port, $key);     # "hash", "string", "none"

use strict;
use warnings;
use JSON::PP ();

my $lua = <<'LUA';
local k = KEYS[1]
local t = redis.call('TYPE', k).ok
local out = {}
if t == 'hash' then
  local h = redis.call('HGETALL', k)
  for i = 1, #h, 2 do out[h[i]] = h[i + 1] end
elseif t == 'string' then
  local s, i = redis.call('GET', k), 1
  while i <= #s do
    local f, n, j = string.match(s, '^(%S+) (%d+) ()', i)
    if not f then return redis.error_reply('no field at ' .. i) end
    n = tonumber(n)
    if string.sub(s, j + n, j + n) ~= '\n' then
      return redis.error_reply('no newline after ' .. f)
    end
    out[f] = string.sub(s, j, j + n - 1)
    i = j + n + 1
  end
elseif t ~= 'none' then
  return redis.error_reply('a ' .. t)
end
if next(out) == nil then return '{}' end
return cjson.encode(out)
LUA

(my $quoted = $lua) =~ s/'/'\\''/g;

sub fields {
    my ($port, $key) = @_;
    my $json = `redis-cli -p $port --raw eval '$quoted' 1 '$key'`;
    chomp $json;
    my $f = eval { JSON::PP::decode_json($json) };
    die "record $key: $json\n" unless ref $f eq 'HASH';
    return %$f;
}

sub type {
    my ($port, $key) = @_;
    my $t = `redis-cli -p $port type '$key'`;
    chomp $t;
    return $t;
}

1;
