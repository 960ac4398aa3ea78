# Call records in Redis, read back through the status endpoint.

use lib 't/lib';
use IdemWait ();
use IdemBg qw(bg done);
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): each block reads the record of a fixed call id, which a
# second run would find with one execution more (--- init runs once).
use IdemRecord;
use JSON::PP ();

END { IdemBg::stop_all() }

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: a successful call: one execution, one attempt, SUCCESS
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_node_id gw-test;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /t?card=4111&x=1\npay=1", "GET /calls/rec-ok-1"]
--- more_headers
X-Call-Id: rec-ok-1
X-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736
--- response_headers_like eval
["", "Content-Type: application/json"]
--- response_body_like eval
["n=1 attempt=1",
 '^\{"call_id":"rec-ok-1","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","state":"SUCCESS","source":"client","node":"gw-test","method":"POST","uri":"/t","created_ms":1\d{12},"updated_ms":1\d{12},"final_status":200,"executions":1,"attempts":\[\{"execution":1,"n":1,"start_ms":1\d{12},"duration_ms":\d+,"outcome":"ok","sent":true,"status":200,"span_id":"[0-9a-f]{16}"\}\]\}$']
--- no_error_log
[error]



=== TEST 2: the upstream answers 503: FAILED
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/9;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /t", "GET /calls/rec-503"]
--- more_headers
X-Call-Id: rec-503
--- error_code eval
[503, 200]
--- response_body_like eval
["failing", '"state":"FAILED",.*"source":"client".*"final_status":503,"executions":1,"attempts":\[\{"execution":1,"n":1,"start_ms":\d+,"duration_ms":\d+,"outcome":"http_503","sent":true,"status":503,']
--- no_error_log
[error]



=== TEST 3: nothing listens: FAILED, connect_error, nothing sent
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:1;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /t", "GET /calls/rec-refused"]
--- more_headers
X-Call-Id: rec-refused
--- error_code eval
[502, 200]
--- response_body_like eval
["Bad Gateway", '"state":"FAILED",.*"final_status":502,.*"outcome":"connect_error","sent":false,"status":null,']
--- no_error_log
[alert]



=== TEST 4: a read timeout after sending: UNKNOWN, never FAILED
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/2000/9;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /t", "GET /calls/rec-timeout"]
--- more_headers
X-Call-Id: rec-timeout
--- error_code eval
[504, 200]
--- response_body_like eval
["Gateway", '"state":"UNKNOWN",.*"final_status":504,.*"outcome":"timeout","sent":true,"status":null,']
--- no_error_log
[alert]



=== TEST 5: the budget ends the call after sending: UNKNOWN, outcome deadline
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        idem_deadline 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/2000/9;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /t", "GET /calls/rec-deadline"]
--- more_headers
X-Call-Id: rec-deadline
--- error_code eval
[504, 200]
--- response_body_like eval
['"call_id":"rec-deadline","state":"UNKNOWN"\}$',
 '"state":"UNKNOWN",.*"outcome":"deadline","sent":true,']
--- no_error_log
[alert]



=== TEST 6: a reset after sending: UNKNOWN, error_after_send
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/reset/9;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["POST /t\npay=1", "GET /calls/rec-reset"]
--- more_headers
X-Call-Id: rec-reset
--- error_code eval
[502, 200]
--- response_body_like eval
["Bad Gateway", '"state":"UNKNOWN",.*"outcome":"error_after_send","sent":true,']
--- no_error_log
[alert]



=== TEST 7: retries: every attempt is in the record
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/2;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /t", "GET /calls/rec-retry"]
--- more_headers
X-Call-Id: rec-retry
X-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736
--- response_body_like eval
["n=3", '"state":"SUCCESS",.*"final_status":200,"executions":1,"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"http_503","sent":true,"status":503,"span_id":"([0-9a-f]{16})"\},\{"execution":1,"n":2,[^}]*"outcome":"http_503","sent":true,"status":503,"span_id":"(?!\1)[0-9a-f]{16}"\},\{"execution":1,"n":3,[^}]*"outcome":"ok","sent":true,"status":200,']
--- no_error_log
[error]



=== TEST 8: a resent id adds an execution; one success makes the record SUCCESS
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1;
    }
    location /calls/ {
        idem_status;
    }
    # the second call's one write meets the record and goes again as a
    # hash once its reply is in (see TEST 9)
    location /pause {
        echo_sleep 0.1;
        echo ok;
    }
--- request eval
["GET /t", "GET /calls/rec-twice", "GET /t", "GET /pause",
 "GET /calls/rec-twice"]
--- more_headers
X-Call-Id: rec-twice
--- error_code eval
[503, 200, 200, 200, 200]
--- response_body_like eval
["failing", '"state":"FAILED",.*"executions":1,', "n=2", "ok",
 '"state":"SUCCESS",.*"final_status":200,"executions":2,"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"http_503"[^}]*\},\{"execution":2,"n":1,[^}]*"outcome":"ok"']
--- no_error_log
[error]



=== TEST 9: UNKNOWN then FAILED: the record stays UNKNOWN
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /u {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:1;
    }
    location /calls/ {
        idem_status;
    }
    # /u's one write meets the record of /t (SET NX) and goes again, as a
    # hash, once its reply is in: a status read sent at once may come
    # first (CI's ASan run saw "executions":1)
    location /pause {
        echo_sleep 0.1;
        echo ok;
    }
--- request eval
["GET /t", "GET /u", "GET /pause", "GET /calls/rec-unknown-failed"]
--- more_headers
X-Call-Id: rec-unknown-failed
--- error_code eval
[504, 502, 200, 200]
--- response_body_like eval
["Gateway", "Bad Gateway", "ok", '"state":"UNKNOWN",.*"final_status":502,"executions":2,']



=== TEST 10: a budget spent before the first attempt: FAILED, no attempt
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /t", "GET /calls/rec-late"]
--- more_headers eval
["X-Call-Id: rec-late\r\nX-Deadline-Ms: 0", ""]
--- error_code eval
[504, 200]
--- response_body_like eval
["deadline-exceeded", '"state":"FAILED",.*"final_status":504,"executions":1,"attempts":\[\]\}']
--- no_error_log
[error]



=== TEST 11: a generated id is recorded with source gateway; $idem_state
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    log_format state 'STATE $idem_call_id $idem_state';
--- config
    location /t {
        idem on;
        idem_record on;
        access_log logs/error.log state;
        return 200 "$idem_call_id\n";
    }
--- request
GET /t
--- response_body_like chomp
^[0-9a-f-]{36}$
--- error_log eval
qr/STATE [0-9a-f-]{36} SUCCESS/



=== TEST 12: unknown id: 404 NOT_FOUND; a bad id: 400; POST: 405; HEAD; no id where no idem_unknown_stream is named: 404 no-unknown-stream (the list of UNKNOWN calls, t/173)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /calls/never-seen", "GET /calls/bad%20id", "POST /calls/x\nbody",
 "HEAD /calls/never-seen", "GET /calls/"]
--- error_code eval
[404, 400, 405, 404, 404]
--- response_body eval
["{\"state\":\"NOT_FOUND\"}\n",
 "{\"type\":\"urn:ngx-idem:problem:invalid-call-id\",\"title\":\"Invalid call id\",\"status\":400,\"detail\":\"the call id in the URI is not a valid call id\"}",
 qr/405 Not Allowed/, "", qr/no-unknown-stream/]
--- no_error_log
[error]



=== TEST 13: idem_status with an explicit id
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location ~ ^/v1/calls/([^/]+)/status$ {
        idem_status $1;
    }
--- request eval
["GET /t", "GET /v1/calls/rec-explicit/status"]
--- more_headers
X-Call-Id: rec-explicit
--- response_body_like eval
["n=1", '^\{"call_id":"rec-explicit",.*"state":"SUCCESS"']
--- no_error_log
[error]



=== TEST 14: idem_key_prefix and idem_record_ttl
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_key_prefix shop:;
    idem_record_ttl 90s;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /t", "GET /calls/rec-prefix"]
--- more_headers
X-Call-Id: rec-prefix
--- response_body_like eval
["n=1", '"state":"SUCCESS"']
--- no_error_log
[error]



=== TEST 15: the record's key and TTL, seen from Redis
--- init
my $port = $ENV{TEST_NGINX_REDIS_PORT};
my $ttl = `redis-cli -p $port pttl 'shop:c:{rec-prefix}'`;
chomp $ttl;
Test::More::ok($ttl > 80000 && $ttl <= 90000, "TTL of shop:c:{rec-prefix} ($ttl ms) is idem_record_ttl");
my $old = `redis-cli -p $port exists 'idem:c:{rec-prefix}'`;
chomp $old;
Test::More::is($old, "0", "nothing under the default prefix");
--- config
    location /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok



=== TEST 16: subrequests are never recorded
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        auth_request /auth;
        echo main;
    }
    location = /auth {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /t", "GET /calls/rec-subrequest"]
--- more_headers
X-Call-Id: rec-subrequest
--- error_code eval
[200, 404]
--- response_body eval
["main\n", "{\"state\":\"NOT_FOUND\"}\n"]
--- no_error_log
[error]



=== TEST 17: a call over within idem_record_arrival_delay: its arrival goes with its end, one write
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        idem_record_arrival_delay 2s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /t", "GET /calls/rec-merged"]
--- more_headers
X-Call-Id: rec-merged
--- wait: 0.05
--- error_code eval
[200, 200]
--- response_body_like eval
["", '"call_id":"rec-merged",.*"state":"SUCCESS",.*"method":"GET","uri":"/t",.*"executions":1,"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"ok"']
--- no_error_log
[error]



=== TEST 18: ... no arrival field of its own, and a short record (one SET: a string, with the TTL); with idem_record_arrival_delay 0, a call's arrival is written before its end
--- init
my %r = IdemRecord::fields($ENV{TEST_NGINX_REDIS_PORT}, 'idem:c:{rec-merged}');
my @f = sort keys %r;
Test::More::is(scalar(grep { /^e:/ } @f), 0, "no e: field (@f)");
Test::More::is(scalar(grep { /^f:/ } @f), 1, "one f: field (@f)");
Test::More::is(scalar(grep { /^a:.+:1$/ } @f), 1, "its attempt (@f)");
Test::More::is($r{v}, '1', 'v');
Test::More::is(IdemRecord::type($ENV{TEST_NGINX_REDIS_PORT},
                                'idem:c:{rec-merged}'), 'string', 'short');
my $ttl = `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} pttl 'idem:c:{rec-merged}'`;
Test::More::cmp_ok($ttl, '>', 86_000_000, "the record's TTL ($ttl ms)");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        idem_record_arrival_delay 0;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request
GET /t
--- more_headers
X-Call-Id: rec-apart
--- wait: 0.05
--- no_error_log
[error]



=== TEST 19: ... both fields, in a hash
--- init
my %r = IdemRecord::fields($ENV{TEST_NGINX_REDIS_PORT}, 'idem:c:{rec-apart}');
my @f = sort keys %r;
Test::More::is(scalar(grep { /^e:/ } @f), 1, "an e: field (@f)");
Test::More::is(scalar(grep { /^f:/ } @f), 1, "an f: field (@f)");
Test::More::is(IdemRecord::type($ENV{TEST_NGINX_REDIS_PORT},
                                'idem:c:{rec-apart}'), 'hash', 'a hash');
--- config
    location /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok



=== TEST 20: a call in flight past idem_record_arrival_delay reads PROCESSING; released, SUCCESS
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /slow {
        idem on;
        idem_record on;
        idem_record_arrival_delay 50ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
    location /calls/ {
        idem_status;
    }
--- init
# the call held at the backend until its arrival is read (no fixed wait)
main::bg('inflight', 'rec-inflight', '/slow');
IdemWait::owner_in('rec-inflight');
my $read = '';
IdemWait::wait_for('its arrival written', sub {
    $read = IdemWait::get($ENV{TEST_NGINX_SERVER_PORT}, '/calls/rec-inflight');
    $read =~ /"state":"PROCESSING"/ });
Test::More::like($read, qr{^\{"call_id":"rec-inflight",.*"state":"PROCESSING",.*"uri":"/slow",.*"final_status":null,"executions":1,"attempts":\[\]\}$}s,
                 'in flight: PROCESSING, no attempt ended');
Test::More::ok(IdemWait::release('rec-inflight'), 'the call released');
Test::More::like(main::done('inflight'), qr{^HTTP/1\.1 200 }, 'its 200');
# its final write leaves after its answer (the log phase): waited for
IdemWait::wait_for('its final write', sub {
    IdemWait::get($ENV{TEST_NGINX_SERVER_PORT}, '/calls/rec-inflight')
        =~ /"final_status":200/ });
--- request
GET /calls/rec-inflight
--- response_body_like eval
'"state":"SUCCESS",.*"final_status":200,"executions":1,'
--- no_error_log
[error]



=== TEST 21: a call in flight within idem_record_arrival_delay is not in Redis yet
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        echo_location_async /call;
        echo_sleep 0.25;
        echo_location /peek;
    }
    location /call {
        proxy_set_header X-Call-Id rec-inflight-early;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/slow;
    }
    location /peek {
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/calls/rec-inflight-early;
    }
    location /slow {
        idem on;
        idem_record on;
        idem_record_arrival_delay 2s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/600/9;
    }
    location /calls/ {
        idem_status;
    }
--- request
GET /t
--- response_body_like
\{"state":"NOT_FOUND"\}
--- timeout: 5
--- no_error_log
[error]



=== TEST 22: the status endpoint's JSON answers carry X-Content-Type-Options: nosniff (200, 404, the 400 problems, HEAD)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
    location /scoped/ {
        idem_dedupe_scope $http_x_tenant;
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /t", "GET /calls/rec-ns-1", "GET /calls/never-seen",
 "GET /calls/bad%20id", "HEAD /calls/never-seen", "GET /scoped/rec-ns-1"]
--- more_headers eval
["X-Call-Id: rec-ns-1", "", "", "", "", ""]
--- error_code eval
[200, 200, 404, 400, 404, 400]
--- response_headers eval
["!X-Content-Type-Options",
 "Content-Type: application/json\nX-Content-Type-Options: nosniff",
 "Content-Type: application/json\nX-Content-Type-Options: nosniff",
 "Content-Type: application/problem+json\nX-Content-Type-Options: nosniff",
 "Content-Type: application/json\nX-Content-Type-Options: nosniff",
 "Content-Type: application/problem+json\nX-Content-Type-Options: nosniff"]
--- response_body_like eval
["n=1", '^\{"call_id":"rec-ns-1",', '^\{"state":"NOT_FOUND"\}$',
 "invalid-call-id", '^$', "empty-dedupe-scope"]
--- no_error_log
[error]



=== TEST 23: ... and the 503 UNKNOWN one (the store is away)
--- http_config
    idem_redis 127.0.0.1:1;
--- config
    location /calls/ {
        idem_status;
    }
--- request
GET /calls/rec-ns-2
--- error_code: 503
--- response_headers
Content-Type: application/json
Retry-After: 1
X-Content-Type-Options: nosniff
--- response_body
{"state":"UNKNOWN"}
--- no_error_log
[alert]



=== TEST 24: bytes that are not UTF-8 in the request line (a raw 0xE9, an overlong form): the status JSON is UTF-8 still (a strict reader takes it), each such byte U+FFFD, UTF-8 as sent
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
my ($code) = IdemWait::raw("GET /t/\xe9t\xc3\xa9\xc0\xaf HTTP/1.0\r\n"
                       . "Host: localhost\r\nX-Call-Id: rec-utf8\r\n\r\n");
Test::More::is($code, 200, 'the call with a raw 0xE9');
my ($status, $body) = IdemWait::raw("GET /calls/rec-utf8 HTTP/1.0\r\n"
                                . "Host: localhost\r\n\r\n");
Test::More::is($status, 200, 'its status');
my $rec = eval { JSON::PP->new->utf8->decode($body) };
Test::More::ok($rec, 'a strict JSON reader takes it' . ($@ ? ": $@" : ''));
Test::More::is($rec && $rec->{uri}, "/t/\x{fffd}t\x{e9}\x{fffd}\x{fffd}",
               '0xE9 and an overlong form read as U+FFFD, UTF-8 as sent');
--- request
GET /calls/rec-utf8
--- response_body_like eval
qr{^\{"call_id":"rec-utf8",[^\[]*"uri":"/t/\xef\xbf\xbdt\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd",}
--- no_error_log
[error]
