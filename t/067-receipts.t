# idem_receipt_header: the service's receipt for a call (a payment id, an
# order number) in an attempt's answer is kept with that execution in the
# record: the status JSON shows it on that attempt and at the top, the
# timeline page beside the execution, the 409 of a dedupe route in its
# record, and the follow-up stream's entry when the call still ended
# UNKNOWN.  A receipt too long or with a byte outside a call id's charset
# is not kept, counted and logged at info.

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): the blocks read records and counters of fixed call ids,
# which a second run would find grown (--- init runs once).
use IdemRecord;
use IdemTls;

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: the receipt in the JSON, on the attempt whose answer had it and at the top; the record's field
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        idem_receipt_header Payment-Receipt;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/svc;
    }
    location /svc {
        add_header Payment-Receipt pay_8f3a;
        return 200 "paid\n";
    }
    location /calls/ {
        idem_status;
    }
    location /metrics {
        idem_metrics;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1", "GET /calls/rcpt-1", "GET /metrics"]
--- more_headers
X-Call-Id: rcpt-1
--- response_headers_like eval
["Payment-Receipt: pay_8f3a", "Content-Type: application/json", ""]
--- response_body_like eval
["paid",
 '^\{"call_id":"rcpt-1",.*"state":"SUCCESS",.*"final_status":200,"receipt":"pay_8f3a","executions":1,"attempts":\[\{"execution":1,"n":1,.*"status":200,"span_id":"[0-9a-f]{16}","receipt":"pay_8f3a"\}\]\}$',
 qr/^idem_receipts_total\{result="kept"\} 1\n^idem_receipts_total\{result="invalid"\} 0\n/m]
--- no_error_log
[error]



=== TEST 2: ... in Redis, "r:<token>" = "<attempt> <receipt>"
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        idem_receipt_header Payment-Receipt;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/svc;
    }
    location /svc {
        add_header Payment-Receipt ord:2026-0042;
        return 200 "ok\n";
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: rcpt-2
--- response_body
ok
--- wait: 0.1
--- no_error_log
[error]



=== TEST 3: invalid (a space) or too long (129 bytes): not kept, counted, logged at info; the answer goes on
--- init
my %f = IdemRecord::fields($ENV{TEST_NGINX_REDIS_PORT}, 'idem:c:{rcpt-2}');
my @r = grep { /^r:/ } keys %f;
Test::More::is(scalar @r, 1, 'TEST 2: one receipt field');
Test::More::is($f{$r[0]}, '1 ord:2026-0042', 'TEST 2: ... of attempt 1');
my ($t) = $r[0] =~ /^r:(.+)$/;
Test::More::ok(exists $f{"f:$t"},
               'TEST 2: ... named by the execution that ended');
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    idem_receipt_header Payment-Receipt;
    location /pay1 {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/svc1;
    }
    location /pay2 {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/svc2;
    }
    location /pay3 {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/svc3;
    }
    location /svc1 {
        add_header Payment-Receipt "pay 8f3a";
        return 200 "ok\n";
    }
    location /svc2 {
        add_header Payment-Receipt "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        return 200 "ok\n";
    }
    location /svc3 {
        add_header Payment-Receipt "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        return 200 "ok\n";
    }
    location /calls/ {
        idem_status;
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["GET /pay1", "GET /pay2", "GET /pay3", "GET /calls/rcpt-3a",
 "GET /calls/rcpt-3c", "GET /metrics"]
--- more_headers eval
["X-Call-Id: rcpt-3a", "X-Call-Id: rcpt-3b", "X-Call-Id: rcpt-3c", "", "", ""]
--- error_code eval
[200, 200, 200, 200, 200, 200]
--- response_body_like eval
["ok", "ok", "ok", '^(?!.*receipt).*"state":"SUCCESS"',
 '"receipt":"a{128}","executions"',
 qr/^idem_receipts_total\{result="kept"\} 1\n^idem_receipts_total\{result="invalid"\} 2\n/m]
--- no_error_log
[error]



=== TEST 4: ... the log says why, at info
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        idem_receipt_header Payment-Receipt;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/svc;
    }
    location /svc {
        add_header Payment-Receipt "pay<8f3a>";
        return 200 "ok\n";
    }
--- request
GET /pay
--- more_headers
X-Call-Id: rcpt-3d
--- response_body
ok
--- error_log eval
qr/\[info\] .*idem: the "Payment-Receipt" of call "rcpt-3d" is not kept: at most 128 bytes of A-Z a-z 0-9 - \. _ ~ :/
--- no_error_log
[error]



=== TEST 5: a retry: the attempt that carried it; the later attempt's wins
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        idem_idempotent on;
        idem_retry 3 backoff=1ms;
        idem_receipt_header Payment-Receipt;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/svc;
    }
    location /svc {
        if ($http_x_call_attempt = 1) {
            return 503;
        }
        if ($http_x_call_attempt = 2) {
            add_header Payment-Receipt early always;
            return 503;
        }
        add_header Payment-Receipt late;
        return 200 "ok\n";
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /pay", "GET /calls/rcpt-4"]
--- more_headers
X-Call-Id: rcpt-4
--- response_body_like eval
["ok",
 '"receipt":"late","executions":1,"attempts":\[\{"execution":1,"n":1,[^}]*"status":503,"span_id":"[0-9a-f]{16}"\},\{"execution":1,"n":2,[^}]*"status":503,"span_id":"[0-9a-f]{16}"\},\{"execution":1,"n":3,[^}]*"status":200,"span_id":"[0-9a-f]{16}","receipt":"late"\}\]\}$']
--- no_error_log
[error]



=== TEST 6: UNKNOWN after a receipt: kept, and in the follow-up stream's entry
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        idem_idempotent on;
        idem_retry 2 backoff=1ms on=http_503,timeout;
        idem_unknown_stream unknown;
        idem_receipt_header Payment-Receipt;
        proxy_read_timeout 300ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/svc;
    }
    location /svc {
        if ($http_x_call_attempt = 1) {
            add_header Payment-Receipt pay_u1 always;
            return 503;
        }
        echo_sleep 1;
        echo ok;
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /pay", "GET /calls/rcpt-5"]
--- more_headers
X-Call-Id: rcpt-5
--- error_code eval
[504, 200]
--- response_body_like eval
["",
 '"state":"UNKNOWN",.*"receipt":"pay_u1","executions":1,"attempts":\[\{"execution":1,"n":1,[^}]*"status":503,"span_id":"[0-9a-f]{16}","receipt":"pay_u1"\},\{"execution":1,"n":2,[^}]*"outcome":"timeout"']
--- wait: 0.1
--- no_error_log
[alert]



=== TEST 7: the timeline page shows it, HTML-escaped as the rest
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        idem_receipt_header Payment-Receipt;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/svc;
    }
    location /svc {
        add_header Payment-Receipt pay_page1;
        return 200 "ok\n";
    }
    location /calls/ {
        idem_status;
    }
--- init
my $out = `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} --raw xrange idem:unknown - +`;
Test::More::like($out, qr/\nreceipt\npay_u1\n/,
                 'TEST 5: the stream entry has the receipt');
Test::More::like($out, qr/\ncall_id\nrcpt-5\n/, 'TEST 5: ... of the call');
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /pay", "GET /calls/rcpt-6"]
--- more_headers eval
["X-Call-Id: rcpt-6", "Accept: text/html"]
--- response_headers_like eval
["", "Content-Type: text/html; charset=utf-8"]
--- response_body_like eval
["ok",
 '<dt>Receipt</dt><dd><code>pay_page1</code></dd>.*<td>200 <code class="receipt">pay_page1</code></td>']
--- no_error_log
[error]



=== TEST 8: a dedupe route: the 409 of a call whose answer was not stored carries the receipt in its record
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_store_max 4;
        idem_call_id_missing reject;
        idem_receipt_header Payment-Receipt;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/svc;
    }
    location /svc {
        add_header Payment-Receipt pay_d1;
        return 200 "a long answer\n";
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1"]
--- more_headers
X-Call-Id: rcpt-7
--- error_code eval
[200, 409]
--- response_body_like eval
["a long answer",
 '"type":"urn:ngx-idem:problem:answer-not-stored".*"record":\{"call_id":"rcpt-7",.*"receipt":"pay_d1","executions":1']
--- no_error_log
[error]



=== TEST 9: gRPC: the receipt in the answer's trailers
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            add_header Content-Type application/grpc;
            add_trailer grpc-status 0;
            add_trailer Payment-Receipt pay_g1;
            return 200 "\0\0\0\0\0";
        }
    }
--- config
    location /idem.Test/Pay {
        idem on;
        idem_record on;
        idem_receipt_header Payment-Receipt;
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /idem.Test/Pay\n\0\0\0\0\0", "GET /calls/rcpt-8"]
--- more_headers eval
["X-Call-Id: rcpt-8\nContent-Type: application/grpc\nTE: trailers", ""]
--- response_body_like eval
["", '"receipt":"pay_g1","executions":1,.*"grpc_status":0,"receipt":"pay_g1"\}\]\}$']
--- no_error_log
[error]



=== TEST 10: proxy_pass with a variable (no balancer of the module's): the receipt of the answer, at the top
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        idem_receipt_header Payment-Receipt;
        set $svc svc;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/$svc;
    }
    location /svc {
        add_header Payment-Receipt pay_var;
        return 200 "ok\n";
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /pay", "GET /calls/rcpt-var"]
--- more_headers
X-Call-Id: rcpt-var
--- response_body_like eval
["ok", '"final_status":200,"receipt":"pay_var","executions":1,"attempts":\[\]\}$']
--- no_error_log
[error]



=== TEST 10b: an https upstream{} with keepalive: each call keeps its own receipt, the later attempt's, on a reused TLS connection
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    upstream tls {
        server 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        keepalive 4;
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 ssl;
        ssl_certificate $TEST_NGINX_CERT_DIR/cert.pem;
        ssl_certificate_key $TEST_NGINX_CERT_DIR/key.pem;
        location / {
            add_header Payment-Receipt "r-$http_x_call_id-$http_x_call_attempt" always;
            if ($http_x_call_attempt = 1) {
                return 503;
            }
            return 200 "ok\n";
        }
    }
--- config
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location /pay {
        idem on;
        idem_record on;
        idem_idempotent on;
        idem_retry 3 backoff=1ms;
        idem_receipt_header Payment-Receipt;
        proxy_pass https://tls;
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /pay", "GET /pay", "GET /calls/rcpt-ka1", "GET /calls/rcpt-ka2"]
--- more_headers eval
["X-Call-Id: rcpt-ka1", "X-Call-Id: rcpt-ka2", "", ""]
--- response_headers eval
["Payment-Receipt: r-rcpt-ka1-2", "Payment-Receipt: r-rcpt-ka2-2", "", ""]
--- response_body_like eval
["ok", "ok",
 '"receipt":"r-rcpt-ka1-2","executions":1,"attempts":\[\{"execution":1,"n":1,[^}]*"status":503,"span_id":"[0-9a-f]{16}"\},\{"execution":1,"n":2,[^}]*"status":200,"span_id":"[0-9a-f]{16}","receipt":"r-rcpt-ka1-2"\}\]\}$',
 '"receipt":"r-rcpt-ka2-2","executions":1,"attempts":\[\{"execution":1,"n":1,[^}]*"status":503,"span_id":"[0-9a-f]{16}"\},\{"execution":1,"n":2,[^}]*"status":200,"span_id":"[0-9a-f]{16}","receipt":"r-rcpt-ka2-2"\}\]\}$']
--- no_error_log
[error]



=== TEST 11: off, the default: the header is not read
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    idem_receipt_header Payment-Receipt;
    location /pay {
        idem on;
        idem_record on;
        idem_receipt_header off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/svc;
    }
    location /calls/ {
        idem_status;
    }
    location /svc {
        add_header Payment-Receipt pay_off;
        return 200 "ok\n";
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /pay", "GET /calls/rcpt-9"]
--- more_headers
X-Call-Id: rcpt-9
--- response_body_like eval
["ok", '^(?!.*receipt).*"state":"SUCCESS"']
--- no_error_log
[error]



=== TEST 12: a trimmed record drops the receipts of the executions it drops
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_max_executions 3;
--- config
    location /pay {
        idem on;
        idem_record on;
        idem_receipt_header Payment-Receipt;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/svc;
    }
    location /svc {
        add_header Payment-Receipt pay_$arg_n;
        return 200 "ok\n";
    }
    location /calls/ {
        idem_status;
    }
    # the last call's one write meets the record and goes again as a
    # hash once its reply is in: a read sent at once may come first
    location /pause {
        echo_sleep 0.1;
        echo ok;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /pay?n=1", "GET /pay?n=2", "GET /pay?n=3", "GET /pay?n=4",
 "GET /pay?n=5", "GET /pay?n=6", "GET /pause", "GET /calls/rcpt-trim"]
--- more_headers
X-Call-Id: rcpt-trim
--- response_body_like eval
["ok", "ok", "ok", "ok", "ok", "ok", "ok",
 '"receipt":"pay_6","executions":6,.*"execution":4,.*"receipt":"pay_4".*"execution":5,.*"receipt":"pay_5".*"execution":6,.*"receipt":"pay_6"']
--- wait: 0.05
--- no_error_log
[error]



=== TEST 13: ... (the fields left)
--- init
my %f = IdemRecord::fields($ENV{TEST_NGINX_REDIS_PORT}, 'idem:c:{rcpt-trim}');
my @r = sort map { $f{$_} } grep { /^r:/ } keys %f;
Test::More::is("@r", "1 pay_4 1 pay_5 1 pay_6",
               'the receipts of the 3 executions kept, no other');
--- config
    location /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok



=== TEST 14: a bad header name, and a duplicate directive, are refused at nginx -t
--- config
    location /pay {
        idem on;
        idem_receipt_header "Payment Receipt";
        return 200;
    }
--- must_die
--- error_log
invalid header name "Payment Receipt" in "idem_receipt_header" directive



=== TEST 15: ... a duplicate
--- config
    location /pay {
        idem on;
        idem_receipt_header Payment-Receipt;
        idem_receipt_header Order-Receipt;
        return 200;
    }
--- must_die
--- error_log
"idem_receipt_header" directive is duplicate
