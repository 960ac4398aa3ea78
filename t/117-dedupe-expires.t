# The contract on every answer of a dedupe route: until when the gateway
# remembers the call id (idem_dedupe_expires_header, Idempotency-Expires:
# <IMF-fixdate> by default): a new call's answer says now + idem_record_ttl
# (its final write refreshes the record's expiry so), a duplicate's says
# the record's own expiry (its PTTL, read by the claim).

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): TEST 3's fixed call id ends UNKNOWN in the first run, so
# the second run's first call is a 409, not a 504.
use HTTP::Date ();

our %at;

# the header's time, less now: what the test compares with the TTL
sub left {
    my ($v) = @_;
    my $t = HTTP::Date::str2time($v // '') // 0;
    return $t - time;
}

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: the owner's answer and the replay say now + the record's TTL (1 h); the replay the record's own
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_ttl 1h;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1"]
--- more_headers
X-Call-Id: ex-1
--- response_headers_like eval
["Idempotency-Expires: \\w{3}, \\d\\d \\w{3} \\d{4} \\d\\d:\\d\\d:\\d\\d GMT",
 "Idempotency-Expires: \\w{3}, \\d\\d \\w{3} \\d{4} \\d\\d:\\d\\d:\\d\\d GMT\nIdempotent-Replayed: true"]
--- no_error_log
[error]



=== TEST 2: ... the values, against the TTL
--- init
use IO::Socket::INET;
for my $n (1, 2) {
    my $s = IO::Socket::INET->new("127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}")
        or die;
    print $s "POST /pay HTTP/1.0\r\nHost: x\r\nX-Call-Id: ex-2\r\n"
             . "Content-Length: 3\r\n\r\nx=1";
    local $/;
    my $r = <$s>;
    my ($v) = $r =~ /^Idempotency-Expires: ([^\r]*)\r$/m;
    my $left = main::left($v);
    Test::More::cmp_ok($left, '>', 3600 - 5, "answer $n: about 1 h ($left s)");
    Test::More::cmp_ok($left, '<=', 3601, "answer $n: not more");
    sleep 1 if $n == 1;
}
--- request
GET /pay
--- more_headers
X-Call-Id: ex-2b
--- error_code: 200
--- no_error_log
[error]



=== TEST 3: a 409 of a call whose outcome is unknown says it too; a record-only route does not
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_ttl 2h;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /rec {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1", "GET /rec"]
--- more_headers
X-Call-Id: ex-3
--- error_code eval
[504, 409, 200]
--- raw_response_headers_like eval
["Idempotency-Expires: ", "Idempotency-Expires: ", "^(?!.*Idempotency-Expires)"]
--- response_body_like eval
["", '"type":"urn:ngx-idem:problem:call-outcome-unknown"', ""]
--- no_error_log
[alert]
[emerg]



=== TEST 4: a name of the operator's; off
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /a {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_expires_header X-Id-Known-Until;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /b {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_expires_header off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request eval
["POST /a\nx=1", "POST /b\nx=1"]
--- more_headers eval
["X-Call-Id: ex-4a", "X-Call-Id: ex-4b"]
--- raw_response_headers_like eval
["X-Id-Known-Until: \\w{3}, ", "^(?!.*(?:Idempotency-Expires|X-Id-Known-Until))"]
--- no_error_log
[error]
