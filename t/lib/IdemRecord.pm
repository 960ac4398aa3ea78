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
#   IdemRecord::set_field($port, $key, $field, $value);  # in either form

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

# a field set (or replaced) in the record, whichever form it is in, its
# expiry kept: a test that edits a record by hand
my $set_lua = <<'LUA';
local k = KEYS[1]
if redis.call('TYPE', k).ok ~= 'string' then
  return redis.call('HSET', k, ARGV[1], ARGV[2])
end
local s, i, out = redis.call('GET', k), 1, {}
while i <= #s do
  local f, n, j = string.match(s, '^(%S+) (%d+) ()', i)
  if not f then break end
  n = tonumber(n)
  if f ~= ARGV[1] then out[#out + 1] = string.sub(s, i, j + n) end
  i = j + n + 1
end
out[#out + 1] = ARGV[1] .. ' ' .. #ARGV[2] .. ' ' .. ARGV[2] .. '\n'
return redis.call('SET', k, table.concat(out), 'KEEPTTL')
LUA

(my $set_quoted = $set_lua) =~ s/'/'\\''/g;

sub set_field {
    my ($port, $key, $field, $value) = @_;
    my $out = `redis-cli -p $port eval '$set_quoted' 1 '$key' '$field' '$value'`;
    die "record $key: $out" if $out =~ /ERR/;
}

sub type {
    my ($port, $key) = @_;
    my $t = `redis-cli -p $port type '$key'`;
    chomp $t;
    return $t;
}

1;
