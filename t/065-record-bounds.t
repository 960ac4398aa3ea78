# Records stay bounded: a call id sent again and again keeps the newest
# idem_record_max_executions executions in its record; older ones are
# folded into a summary that keeps the record's state rule true.  Also
# records left larger by an older version are trimmed by the next write,
# and read back whole.

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): the blocks count the executions kept in the record of a
# fixed call id; a second run adds its own (--- init runs once).
use IdemRecord;

no_long_string();
no_shuffle();
run_tests();

# Writes a record of N finished executions, as an older version left them
# (three fields each, no summary): execution 1 SUCCESS, the others FAILED.
sub old_record {
    my ($key, $n) = @_;
    my $lua = <<'LUA';
local k, n, t0 = KEYS[1], tonumber(ARGV[1]), 1795000000000
for i = 1, n do
  local tok = string.format('%016x', i)
  local c = string.format('%.0f', t0 + i)
  local info = c .. ' client gw-old GET 4bf92f3577b34da6a3ce929d0e0e4736 /old'
  local s = (i == 1) and {'SUCCESS 200', 'ok 1 200'}
                      or {'FAILED 503', 'http_503 1 503'}
  redis.call('HSET', k, 'e:' .. tok, 'R ' .. info,
             'f:' .. tok, s[1] .. ' ' .. c .. ' ' .. info,
             'a:' .. tok .. ':1', c .. ' 1 ' .. s[2] .. ' 00f067aa0ba902b7')
end
redis.call('PEXPIRE', k, 600000)
return redis.call('HLEN', k)
LUA
    $lua =~ s/'/'\\''/g;
    my $len = `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} eval '$lua' 1 '$key' $n`;
    chomp $len;
    return $len;
}

# field names of a record, and how many executions they are: an execution
# has "e:" (its arrival), "f:" (its end, with the arrival when that was
# not written before), or both
sub fields {
    my ($key) = @_;
    my %r = IdemRecord::fields($ENV{TEST_NGINX_REDIS_PORT}, $key);
    my @f = sort keys %r;
    my %ex = map { /^[ef]:(.+)$/ ? ($1 => 1) : () } @f;
    return (scalar(@f), scalar(keys %ex), @f);
}

# one field of a record, or "(none)"
sub field {
    my ($key, $name) = @_;
    my %r = IdemRecord::fields($ENV{TEST_NGINX_REDIS_PORT}, $key);
    return $r{$name} // '(none)';
}

# one field of a record once it holds what is wanted, or what it holds
# after 5 s: a count lands after the write that it counts, itself after
# the response, later than a block's wait on a slow (sanitized) build
# the record's fields (as fields()) once it holds $want executions, or
# as it is after 5 s: its trim follows the write that passed the cap
sub fields_soon {
    my ($key, $want) = @_;
    my @r;
    for (1 .. 100) {
        @r = fields($key);
        return @r if $r[1] == $want;
        select(undef, undef, undef, 0.05);
    }
    return @r;
}

sub field_soon {
    my ($key, $name, $want) = @_;
    my $v;
    for (1 .. 100) {
        $v = field($key, $name);
        return $v if $v eq $want;
        select(undef, undef, undef, 0.05);
    }
    return $v;
}

__DATA__

=== TEST 1: a call id sent 6 times with idem_record_max_executions 3
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_max_executions 3;
--- config
    location /ok {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /fail {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/99;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /ok", "GET /fail", "GET /fail", "GET /fail", "GET /fail", "POST /fail\nx=1"]
--- more_headers
X-Call-Id: rb-1
--- wait: 0.05
--- error_code eval
[200, 503, 503, 503, 503, 503]
--- no_error_log
[error]



=== TEST 2: three executions are kept, the first success is summarised: still SUCCESS
--- init
my ($len, $e, @f) = main::fields_soon('idem:c:{rb-1}', 3);
Test::More::is($e, 3, "3 executions in the record (fields: @f)");
Test::More::cmp_ok($len, '<=', 3 * 4 + 2, "$len fields");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_max_executions 3;
--- config
    location /calls/ {
        idem_status;
    }
--- request
GET /calls/rb-1
--- response_body_like chomp
^\{"call_id":"rb-1","trace_id":"[0-9a-f]{32}","state":"SUCCESS","source":"client","node":"[^"]+","method":"GET","uri":"/ok","created_ms":1\d{12},"updated_ms":1\d{12},"final_status":503,"executions":6,"attempts":\[\{"execution":4,"n":1,[^}]*"outcome":"http_503"[^}]*\},\{"execution":5,"n":1,[^}]*"outcome":"http_503"[^}]*\},\{"execution":6,"n":1,[^}]*"outcome":"http_503"[^}]*\}\]\}$
--- no_error_log
[error]



=== TEST 3: UNKNOWN, then FAILED over and over: the record stays UNKNOWN
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_max_executions 2;
--- config
    location /slow {
        idem on;
        idem_record on;
        proxy_read_timeout 100ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/99;
    }
    location /dead {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:1;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /slow", "GET /dead", "GET /dead", "GET /dead", "GET /calls/rb-unknown"]
--- more_headers eval
["X-Call-Id: rb-unknown", "X-Call-Id: rb-unknown", "X-Call-Id: rb-unknown",
 "X-Call-Id: rb-unknown", ""]
--- wait: 0.05
--- error_code eval
[504, 502, 502, 502, 200]
--- response_body_like eval
["Gateway", "Bad Gateway", "Bad Gateway", "Bad Gateway",
 '^\{"call_id":"rb-unknown",.*"state":"UNKNOWN",.*"uri":"/slow",.*"final_status":502,"executions":4,"attempts":\[\{"execution":3,"n":1,[^}]*"outcome":"connect_error"[^}]*\},\{"execution":4,"n":1,[^}]*"outcome":"connect_error"[^}]*\}\]\}$']
--- no_error_log
[alert]



=== TEST 4: a 9000-field record left by an older version is trimmed once the cap is passed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_max_executions 3;
--- config
    location /ok {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
Test::More::is(main::old_record('idem:c:{rb-big}', 3000), 9000,
               "a record of 3000 executions");
--- request eval
["GET /ok", "GET /ok", "GET /ok", "GET /ok"]
--- more_headers
X-Call-Id: rb-big
--- wait: 0.1
--- response_body_like eval
['\An=1 attempt=1 ', '\nn=2 [^\n]*\n\z', '\nn=3 [^\n]*\n\z', '\nn=4 [^\n]*\n\z']
--- no_error_log
[error]



=== TEST 5: ... to the newest 3; the status says what became of the 3001 others
--- init
my ($len, $e, @f) = main::fields_soon('idem:c:{rb-big}', 3);
Test::More::is($e, 3, "3 executions kept");
Test::More::cmp_ok($len, '<=', 3 * 4 + 2, "$len fields");
Test::More::ok(!grep({ /^[efpa]:000000000000/ } @f), "none of the old ones: @f");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
--- request
GET /calls/rb-big
--- response_body_like chomp
^\{"call_id":"rb-big","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","state":"SUCCESS","source":"client","node":"gw-old","method":"GET","uri":"/old","created_ms":1795000000001,"updated_ms":1\d{12},"final_status":200,"executions":3004,"attempts":\[\{"execution":3002,"n":1,[^}]*"outcome":"ok"[^}]*\},\{"execution":3003,"n":1,[^}]*"outcome":"ok"[^}]*\},\{"execution":3004,"n":1,[^}]*"outcome":"ok","sent":true,"status":200,"span_id":"[0-9a-f]{16}"\}\]\}$
--- no_error_log
[error]



=== TEST 6: a status read of an 8000-execution record (never trimmed): all counted, the newest 100 shown
--- init
Test::More::is(main::old_record('idem:c:{rb-huge}', 8000), 24000,
               "a record of 8000 executions");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
--- request
GET /calls/rb-huge
--- response_body_like chomp
^\{"call_id":"rb-huge",[^\[]*"state":"SUCCESS",[^\[]*"created_ms":1795000000001,"updated_ms":1795000008000,"final_status":503,"executions":8000,"attempts":\[\{"execution":7901,"n":1,"start_ms":1795000007901,(?:[^\]]*?\},\{){99}"execution":8000,[^\]]*\]\}$
--- no_error_log
[error]



=== TEST 7: the claim of an execution summarised still answers its duplicates
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_max_executions 2;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /r {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["POST /d\norder=1", "GET /r", "GET /r", "GET /r", "POST /d\norder=1",
 "GET /calls/rb-owner"]
--- more_headers eval
["X-Call-Id: rb-owner", "X-Call-Id: rb-owner", "X-Call-Id: rb-owner",
 "X-Call-Id: rb-owner", "X-Call-Id: rb-owner", ""]
--- wait: 0.05
--- response_headers eval
["!Idempotent-Replayed", "", "", "", "Idempotent-Replayed: true", ""]
--- response_body_like eval
['\An=1 attempt=1 [^\n]*method=POST body=order=1\n\z', '\nn=2 [^\n]*\n\z',
 '\nn=3 [^\n]*\n\z', '\nn=4 [^\n]*\n\z',
 '\An=1 attempt=1 [^\n]*method=POST body=order=1\n\z',
 '^\{"call_id":"rb-owner",.*"method":"POST","uri":"/d",.*"executions":4,"attempts":\[\{"execution":3,"n":1,[^}]*\},\{"execution":4,"n":1,[^}]*\}\]\}$']
--- no_error_log
[error]



=== TEST 7b: ... and so does its resolution: applied, summarised by the trim, a resend still gets 409 call-applied
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_max_executions 2;
--- config
    location /u {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /r {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status resolve=on;
    }
--- request eval
["POST /u\norder=1", "POST /calls/rb-res-a\n{\"outcome\": \"applied\"}",
 "GET /r", "GET /r", "GET /r", "POST /u\norder=1", "GET /calls/rb-res-a"]
--- more_headers eval
["X-Call-Id: rb-res-a", "", "X-Call-Id: rb-res-a", "X-Call-Id: rb-res-a",
 "X-Call-Id: rb-res-a", "X-Call-Id: rb-res-a", ""]
--- wait: 0.05
--- error_code eval
[504, 200, 200, 200, 200, 409, 200]
--- response_body_like eval
["", '"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"applied"',
 '\nn=2 [^\n]*\n\z', '\nn=3 [^\n]*\n\z', '\nn=4 [^\n]*\n\z',
 'problem:call-applied"',
 '^\{"call_id":"rb-res-a",.*"state":"SUCCESS",.*"uri":"/u",.*"executions":4,"attempts":\[\{"execution":3,"n":1,[^}]*\},\{"execution":4,"n":1,[^}]*\}\]\}$']
--- no_error_log
[alert]



=== TEST 7c: ... not_applied, summarised: a resend is still released, and runs
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_max_executions 2;
--- config
    location /u {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /r {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status resolve=on;
    }
--- request eval
["POST /u\norder=1", "POST /calls/rb-res-n\n{\"outcome\": \"not_applied\"}",
 "GET /r", "GET /r", "GET /r", "POST /u\norder=1"]
--- more_headers eval
["X-Call-Id: rb-res-n", "", "X-Call-Id: rb-res-n", "X-Call-Id: rb-res-n",
 "X-Call-Id: rb-res-n", "X-Call-Id: rb-res-n"]
--- wait: 0.05
--- error_code eval
[504, 200, 200, 200, 200, 200]
--- response_body_like eval
["", '"state":"FAILED",.*"resolved":\{"execution":1,"outcome":"not_applied"',
 '\nn=2 [^\n]*\n\z', '\nn=3 [^\n]*\n\z', '\nn=4 [^\n]*\n\z',
 '\nn=5 [^\n]*method=POST body=order=1\n\z']
--- no_error_log
[alert]



=== TEST 8: with a cap of 8, older executions go in batches: 10 calls keep 10
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_max_executions 8;
--- config
    location /ok {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
[("GET /ok") x 10, "GET /calls/rb-batch"]
--- more_headers eval
[("X-Call-Id: rb-batch") x 10, ""]
--- wait: 0.05
--- response_body_like eval
[("n=") x 10,
 '^\{"call_id":"rb-batch",.*"executions":10,"attempts":\[\{"execution":3,"n":1,[^\]]*\{"execution":10,"n":1,[^\]]*\]\}$']
--- no_error_log
[error]



=== TEST 9: ... the 11th passes 8 + 8/4: back to the newest 8
--- init
my ($len, $e, @f) = main::fields('idem:c:{rb-batch}');
Test::More::is($e, 10, "10 executions before");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_max_executions 8;
--- config
    location /ok {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /ok", "GET /calls/rb-batch"]
--- more_headers eval
["X-Call-Id: rb-batch", ""]
--- wait: 0.05
--- response_body_like eval
["n=11 ",
 '^\{"call_id":"rb-batch",.*"executions":11,"attempts":\[\{"execution":4,"n":1,[^\]]*\{"execution":11,"n":1,[^\]]*\]\}$']
--- no_error_log
[error]



=== TEST 10: ... and Redis holds 8
--- init
my ($len, $e, @f) = main::fields_soon('idem:c:{rb-batch}', 8);
Test::More::is($e, 8, "8 executions after");
--- config
    location /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- no_error_log
[error]



=== TEST 11: idem_record_max_executions takes a number from 1 to 10000
--- http_config
    idem_record_max_executions 0;
--- config
--- must_die
--- error_log
invalid value "0" in "idem_record_max_executions" directive, it must be a number from 1 to 10000



=== TEST 12: idem_record_max_executions above 10000
--- http_config
    idem_record_max_executions 10001;
--- config
--- must_die
--- error_log
invalid value "10001" in "idem_record_max_executions" directive, it must be a number from 1 to 10000



=== TEST 13: idem_record_max_executions is an http directive
--- config
    location /t { idem_record_max_executions 5; }
--- must_die
--- error_log
"idem_record_max_executions" directive is not allowed here


=== TEST 14: a call id used once costs no count
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /ok {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /ok", "POST /d\nx", "GET /ok"]
--- more_headers eval
["X-Call-Id: rb-once", "X-Call-Id: rb-claim", "X-Call-Id: rb-first"]
--- wait: 0.5
--- error_code eval
[200, 200, 200]
--- no_error_log
[error]



=== TEST 15: ... its record has "v" and no "n"; an execution more counts 1, a record-only one after a fresh claim too
--- init
Test::More::is(main::field_soon('idem:c:{rb-once}', 'v', '1'), '1',
               'v: a record');
Test::More::is(main::field('idem:c:{rb-once}', 'n'), '(none)', 'no count');
Test::More::is(main::field_soon('idem:c:{rb-claim}', 'v', '1'), '1',
               'v, by the claim');
Test::More::is(main::field('idem:c:{rb-claim}', 'n'), '(none)',
               'a fresh claim: no count');
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /ok {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request eval
["GET /ok", "GET /ok", "POST /d\nx"]
--- more_headers eval
["X-Call-Id: rb-once", "X-Call-Id: rb-claim", "X-Call-Id: rb-first"]
--- wait: 0.5
--- error_code eval
[200, 200, 200]
--- no_error_log
[error]



=== TEST 16: ... so each of the three holds 2 executions and counts 1
--- init
Test::More::is(main::field_soon("idem:c:{$_}", 'n', '1'), '1',
               "$_: one counted")
    for qw(rb-once rb-claim rb-first);
Test::More::is((main::fields("idem:c:{$_}"))[1], 2, "$_: 2 executions")
    for qw(rb-once rb-claim rb-first);
--- config
    location /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- no_error_log
[error]
