# Deadline budgets: the route's budget, shrunk (never extended) by the
# caller, passed upstream as what is left, enforced before and during an
# attempt.

use Test::Nginx::Socket 'no_plan';

repeat_each(2);

no_long_string();
run_tests();

__DATA__

=== TEST 1: the route's budget reaches the upstream as what is left
--- config
    location /t {
        idem on;
        idem_deadline 5s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "deadline=$http_x_deadline_ms";
    }
--- request
GET /t
--- response_body_like chomp
^deadline=(?:4[0-9]{3}|5000)$
--- no_error_log
[error]



=== TEST 2: the caller may shrink the budget
--- config
    location /t {
        idem on;
        idem_deadline 5s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "deadline=$http_x_deadline_ms";
    }
--- request
GET /t
--- more_headers
X-Deadline-Ms: 1500
--- response_body_like chomp
^deadline=1(?:[0-4][0-9]{2}|500)$
--- no_error_log
[error]



=== TEST 3: the caller may not extend it
--- config
    location /t {
        idem on;
        idem_deadline 800ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "deadline=$http_x_deadline_ms";
    }
--- request
GET /t
--- more_headers
X-Deadline-Ms: 60000
--- response_body_like chomp
^deadline=(?:[0-7][0-9]{2}|800|[0-9]{1,2})$
--- no_error_log
[error]



=== TEST 4: no budget: no deadline header upstream, the client's is dropped
--- config
    location /t {
        idem on;
        idem_deadline_header off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /u {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "deadline=[$http_x_deadline_ms] remaining=[$idem_deadline_remaining]";
    }
--- request eval
["GET /t", "GET /u"]
--- more_headers eval
["X-Deadline-Ms: 100", ""]
--- response_body eval
["deadline=[100] remaining=[]\n", "deadline=[] remaining=[]\n"]
--- no_error_log
[error]



=== TEST 5: a caller's deadline on a route without a budget is the budget
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "deadline=$http_x_deadline_ms";
    }
--- request
GET /t
--- more_headers
X-Deadline-Ms: 2000
--- response_body_like chomp
^deadline=(?:1[0-9]{3}|2000)$
--- no_error_log
[error]



=== TEST 6: grpc-timeout shrinks the budget too, and is not passed on
--- config
    location /t {
        idem on;
        idem_deadline 10s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "deadline=$http_x_deadline_ms grpc=[$http_grpc_timeout]";
    }
--- request eval
["GET /t", "GET /t", "GET /t"]
--- more_headers eval
["grpc-timeout: 2S", "grpc-timeout: 300m", "grpc-timeout: 1M"]
--- response_body_like eval
["^deadline=(?:1[0-9]{3}|2000) grpc=\\[\\]\$",
 "^deadline=(?:[0-2][0-9]{2}|300|[0-9]{1,2}) grpc=\\[\\]\$",
 "^deadline=(?:[0-9]{4}|10000) grpc=\\[\\]\$"]
--- no_error_log
[error]



=== TEST 7: bad deadline headers: 400, nothing forwarded
--- config
    location /t {
        idem on;
        idem_deadline 5s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached";
    }
--- request eval
[("GET /t") x 8]
--- more_headers eval
["X-Deadline-Ms: -5", "X-Deadline-Ms: abc", "X-Deadline-Ms: 1.5",
 "X-Deadline-Ms: 99999999999", "X-Deadline-Ms: 2147483648",
 "X-Deadline-Ms: 5s", "X-Deadline-Ms: +5",
 "X-Deadline-Ms: 10\r\nX-Deadline-Ms: 20"]
--- error_code eval
[(400) x 8]
--- response_body_like eval
[('^\{"type":"urn:ngx-idem:problem:invalid-deadline","title":"Invalid deadline","status":400,"detail":"header X-Deadline-Ms: not a number of milliseconds from 0 to 2147483647"') x 7,
 '"detail":"header X-Deadline-Ms: sent more than once"']
--- no_error_log
[error]
GET /back



=== TEST 8: an empty deadline header is rejected
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
--- raw_request eval
"GET /t HTTP/1.1\r\nHost: localhost\r\nX-Deadline-Ms:\r\nConnection: close\r\n\r\n"
--- error_code: 400
--- response_body_like chomp
invalid-deadline
--- no_error_log
[error]



=== TEST 9: bad grpc-timeout values: 400
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached";
    }
--- request eval
[("GET /t") x 5]
--- more_headers eval
["grpc-timeout: 5x", "grpc-timeout: 123456789S", "grpc-timeout: S",
 "grpc-timeout: -1S", "grpc-timeout: 1S\r\ngrpc-timeout: 2S"]
--- error_code eval
[(400) x 5]
--- response_body_like eval
[('"detail":"header grpc-timeout: not a valid gRPC timeout"') x 5]
--- no_error_log
[error]
GET /back



=== TEST 10: a budget spent before the first attempt: 504 problem, no upstream
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached";
    }
--- request
GET /t
--- more_headers
X-Call-Id: late-1
X-Deadline-Ms: 0
--- error_code: 504
--- response_headers
Content-Type: application/problem+json
X-Call-Id: late-1
--- response_body_like chomp
^\{"type":"urn:ngx-idem:problem:deadline-exceeded","title":"Deadline exceeded","status":504,"detail":"the call's budget was spent before the first attempt","call_id":"late-1"\}$
--- no_error_log
[error]
GET /back



=== TEST 11: a budget spent during access checks: 504 problem, no upstream
--- config
    location /t {
        idem on;
        idem_deadline 200ms;
        auth_request /auth;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location = /auth {
        echo_sleep 0.4;
        echo ok;
    }
    location /back {
        echo "reached";
    }
--- request
GET /t
--- error_code: 504
--- response_body_like chomp
deadline-exceeded
--- no_error_log
[error]
GET /back



=== TEST 12: the call ends at its budget, whatever proxy_read_timeout says
--- config
    location /t {
        idem on;
        idem_deadline 300ms;
        proxy_read_timeout 60s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/3000/9;
    }
--- request
GET /t
--- timeout: 1.5
--- error_code: 504
--- error_log
upstream timed out
--- no_error_log
[alert]
[crit]



=== TEST 13: a caller's shorter deadline ends the call as well
--- config
    location /t {
        idem on;
        idem_deadline 60s;
        proxy_connect_timeout 60s;
        proxy_read_timeout 60s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/3000/9;
    }
--- request
GET /t
--- more_headers
X-Deadline-Ms: 250
--- timeout: 1.5
--- error_code: 504
--- no_error_log
[alert]
[crit]



=== TEST 14: a response already streaming is not cut by the budget
--- config
    location /t {
        idem on;
        idem_deadline 300ms;
        proxy_buffering off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "first";
        echo_flush;
        echo_sleep 0.6;
        echo "second";
    }
--- request
GET /t
--- response_body
first
second
--- no_error_log
[error]



=== TEST 15: per_try_timeout ends an attempt; the retry gets a smaller budget
--- config
    location /t {
        idem on;
        idem_deadline 10s;
        idem_idempotent on;
        idem_retry 2 backoff=0 per_try_timeout=200ms;
        proxy_read_timeout 60s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
--- request
GET /t
--- timeout: 1.5
--- response_body_like chomp
^n=1 attempt=1 deadline=(\d+) [^\n]*\nn=2 attempt=2 deadline=(?!\1 )\d+ 
--- error_log
upstream timed out
--- no_error_log
[alert]



=== TEST 16: $idem_deadline_remaining
--- config
    location /t {
        idem on;
        idem_deadline 3s;
        return 200 "left=$idem_deadline_remaining\n";
    }
--- request
GET /t
--- response_body_like chomp
^left=(?:2[0-9]{3}|3000)$
--- no_error_log
[error]



=== TEST 17: a custom deadline header, in and out
--- config
    location /t {
        idem on;
        idem_deadline_header X-Timeout-Ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "custom=$http_x_timeout_ms std=[$http_x_deadline_ms]";
    }
--- request
GET /t
--- more_headers
X-Timeout-Ms: 700
X-Deadline-Ms: 5
--- response_body_like chomp
^custom=(?:[0-6][0-9]{2}|700|[0-9]{1,2}) std=\[5\]$
--- no_error_log
[error]



=== TEST 18: grpc_pass upstreams also get grpc-timeout
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            add_header X-Seen "grpc-timeout=$http_grpc_timeout deadline=$http_x_deadline_ms";
            return 200 "h2\n";
        }
    }
--- config
    location /t {
        idem on;
        idem_deadline 2s;
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request
GET /t
--- response_headers_like
X-Seen: grpc-timeout=(?:1[0-9]{3}|2000)m deadline=(?:1[0-9]{3}|2000)
--- no_error_log
[error]



=== TEST 19: a route budget over 99999999 ms goes as grpc-timeout in seconds
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            add_header X-Seen "grpc-timeout=$http_grpc_timeout deadline=$http_x_deadline_ms";
            return 200 "h2\n";
        }
    }
--- config
    location /t {
        idem on;
        idem_deadline 200000s;
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request
GET /t
--- response_headers_like
X-Seen: grpc-timeout=(?:199999|200000)S deadline=(?:1999999[0-9]{2}|200000000)
--- no_error_log
[error]



=== TEST 20: a caller's X-Deadline-Ms of 100000000 goes as 99999S, never 9 digits
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            add_header X-Seen "grpc-timeout=$http_grpc_timeout deadline=$http_x_deadline_ms";
            return 200 "h2\n";
        }
    }
--- config
    location /t {
        idem on;
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request
GET /t
--- more_headers
X-Deadline-Ms: 100000000
--- response_headers_like
X-Seen: grpc-timeout=(?:99999|100000)S deadline=(?:999999[0-9]{2}|100000000)
--- no_error_log
[error]



=== TEST 21: the largest budget idem_deadline takes, and 99999999 ms exactly
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            add_header X-Seen "grpc-timeout=$http_grpc_timeout";
            return 200 "h2\n";
        }
    }
--- config
    location /max {
        idem on;
        idem_deadline 2147483647ms;
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
    location /edge {
        idem on;
        idem_deadline 99999999ms;
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request eval
["GET /max", "GET /edge"]
--- response_headers_like eval
["X-Seen: grpc-timeout=(?:2147482|2147483)S",
 "X-Seen: grpc-timeout=999999[0-9]{2}m"]
--- no_error_log
[error]



=== TEST 22: a budget that runs out during an attempt answers the same problem+json as one spent before it, with the call id and the execution's state
--- config
    location /t {
        idem on;
        idem_deadline 300ms;
        proxy_read_timeout 60s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/3000/99;
    }
--- request
GET /t
--- more_headers
X-Call-Id: during-22
--- timeout: 1.5
--- error_code: 504
--- response_headers
Content-Type: application/problem+json
Cache-Control: no-store
X-Call-Id: during-22
--- response_body_like chomp
^\{"type":"urn:ngx-idem:problem:deadline-exceeded","title":"Deadline exceeded","status":504,"detail":"the call's budget ran out during an attempt","call_id":"during-22","state":"UNKNOWN"\}$
--- no_error_log
[alert]
[crit]



=== TEST 23: a generated id is in that answer too (the call went on: a client asks the status with it); HEAD gets the headers alone
--- config
    location /t {
        idem on;
        idem_deadline 300ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/3000/99;
    }
--- request eval
["GET /t", "HEAD /t"]
--- timeout: 1.5
--- error_code eval
[504, 504]
--- response_headers_like eval
["X-Call-Id: [0-9a-f-]{36}\nContent-Type: application/problem\\+json",
 "X-Call-Id: [0-9a-f-]{36}\nContent-Type: application/problem\\+json"]
--- response_body_like eval
['^\{"type":"urn:ngx-idem:problem:deadline-exceeded",.*"call_id":"[0-9a-f-]{36}","state":"UNKNOWN"\}$',
 '^$']
--- no_error_log
[alert]
[crit]



=== TEST 24: the operator's error_page for 504 still wins over that problem, to a URI and to a named location
--- config
    location /t {
        idem on;
        idem_deadline 300ms;
        error_page 504 /err;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/3000/99;
    }
    location /n {
        idem on;
        idem_deadline 300ms;
        error_page 504 @late;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/3000/99;
    }
    location /err {
        internal;
        default_type text/plain;
        return 200 "operator's page for $idem_call_id\n";
    }
    location @late {
        default_type text/plain;
        return 200 "named page for $idem_call_id\n";
    }
--- request eval
["GET /t", "GET /n"]
--- more_headers eval
["X-Call-Id: page-24", "X-Call-Id: named-24"]
--- timeout: 1.5
--- error_code eval
[504, 504]
--- response_headers eval
["Content-Type: text/plain", "Content-Type: text/plain"]
--- response_body eval
["operator's page for page-24\n", "named page for named-24\n"]
--- no_error_log
[alert]
[crit]
