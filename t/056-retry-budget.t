# idem_retry_budget: over a sliding window, an upstream's retries may not
# exceed ratio x calls that made a first attempt, plus min per second x
# window.  A refused retry is not made: the call ends with what its last
# attempt got.  The upstream here is a location of the same server that
# answers 503 to everything; X-Attempts shows how many attempts a call made.
# Two workers sharing one budget, and reloads: t/058-storm-workers.t.

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): the retry budget is the upstream's, kept across requests:
# a second run finds it spent by the first.

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: exactly at the ratio: a retry that makes retries = ratio x calls is allowed
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=1ms;
        idem_retry_budget ratio=0.5 min=0;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fail;
    }
    location /fail {
        return 503;
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["GET /t", "GET /t", "GET /t", "GET /t", "GET /metrics"]
--- error_code eval
[503, 503, 503, 503, 200]
--- raw_response_headers_like eval
["X-Attempts: 1\r\n", "X-Attempts: 2\r\n", "X-Attempts: 1\r\n",
 "X-Attempts: 2\r\n", ""]
--- response_body_like eval
["", "", "", "",
 qr/^idem_retries_total 2\n.*^idem_retry_budget_exhausted_total\{upstream="127\.0\.0\.1:$ENV{TEST_NGINX_SERVER_PORT}"\} 2\n/ms]
--- no_error_log
[error]



=== TEST 2: min alone (ratio=0): min per second x window retries, then none
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=1ms;
        idem_retry_budget ratio=0 min=2 window=1s;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fail;
    }
    location /fail {
        return 503;
    }
--- request eval
["GET /t", "GET /t", "GET /t"]
--- error_code eval
[503, 503, 503]
--- raw_response_headers_like eval
["X-Attempts: 3\r\n", "X-Attempts: 1\r\n", "X-Attempts: 1\r\n"]
--- no_error_log
[error]



=== TEST 3: the window slides past: retries older than the window no longer count
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=1ms;
        idem_retry_budget ratio=0 min=1 window=1s;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fail;
    }
    location /fail {
        return 503;
    }
    location /pause {
        echo_sleep 1.2;
        echo ok;
    }
--- request eval
["GET /t", "GET /t", "GET /pause", "GET /t", "GET /t"]
--- error_code eval
[503, 503, 200, 503, 503]
--- raw_response_headers_like eval
["X-Attempts: 2\r\n", "X-Attempts: 1\r\n", "", "X-Attempts: 2\r\n",
 "X-Attempts: 1\r\n"]
--- no_error_log
[error]



=== TEST 4: without a budget (and with "off" under one): every call gets its attempts
--- http_config
    idem_retry_budget ratio=0 min=0;
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=1ms;
        idem_retry_budget off;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fail;
    }
    location /fail {
        return 503;
    }
--- request eval
["GET /t", "GET /t", "GET /t"]
--- error_code eval
[503, 503, 503]
--- raw_response_headers_like eval
["X-Attempts: 3\r\n", "X-Attempts: 3\r\n", "X-Attempts: 3\r\n"]
--- no_error_log
[error]



=== TEST 5: inherited from http{}: ratio=0 min=0 allows no retry at all
--- http_config
    idem_retry_budget ratio=0 min=0;
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=1ms;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fail;
    }
    location /fail {
        return 503;
    }
--- request eval
["GET /t", "GET /t"]
--- error_code eval
[503, 503]
--- raw_response_headers_like eval
["X-Attempts: 1\r\n", "X-Attempts: 1\r\n"]
--- no_error_log
[error]



=== TEST 6: a retry after Retry-After counts too
--- config
    location /ok {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=1ms;
        idem_retry_budget ratio=0.5 min=0;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /ra {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=1ms;
        idem_retry_budget ratio=0.5 min=0;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1/1;
    }
--- request eval
["GET /ok", "GET /ra", "GET /ra"]
--- error_code eval
[200, 200, 503]
--- raw_response_headers_like eval
["", "X-Attempts: 2\r\n", "X-Attempts: 1\r\n"]
--- no_error_log
[error]



=== TEST 7: the record says why no retry followed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_record on;
        idem_retry 3 backoff=1ms;
        idem_retry_budget ratio=0 min=0;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fail;
    }
    location /fail {
        return 503;
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /t", "GET /calls/budget-rec-1"]
--- more_headers
X-Call-Id: budget-rec-1
--- error_code eval
[503, 200]
--- response_body_like eval
["",
 '"state":"FAILED",.*"final_status":503,"executions":1,"attempts":\[\{"execution":1,"n":1,"start_ms":\d+,"duration_ms":\d+,"outcome":"http_503","sent":true,"status":503,"span_id":"[0-9a-f]{16}","no_retry":"retry_budget"\}\]\}$']
--- no_error_log
[error]



=== TEST 8: per upstream: one block's spent budget leaves another's alone
--- http_config
    upstream a {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
    upstream b {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
--- config
    idem_retry_budget ratio=0 min=1 window=10s;
    location /a {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=1ms;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://a/fail;
    }
    location /b {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=1ms;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://b/fail;
    }
    location /fail {
        return 503;
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["GET /a", "GET /a", "GET /a", "GET /a", "GET /a", "GET /a", "GET /b",
 "GET /metrics"]
--- error_code eval
[503, 503, 503, 503, 503, 503, 503, 200]
--- raw_response_headers_like eval
["X-Attempts: 3\r\n", "X-Attempts: 3\r\n", "X-Attempts: 3\r\n",
 "X-Attempts: 3\r\n", "X-Attempts: 3\r\n", "X-Attempts: 1\r\n",
 "X-Attempts: 3\r\n", ""]
--- response_body_like eval
["", "", "", "", "", "", "",
 qr/^idem_retry_budget_exhausted_total\{upstream="a"\} 1\n.*^idem_retry_budget_exhausted_total\{upstream="b"\} 0\n/ms]
--- no_error_log
[error]



=== TEST 9: a bad ratio fails nginx -t, naming the directive and the value
--- config
    location /t {
        idem on;
        idem_retry_budget ratio=abc;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fail;
    }
--- must_die
--- error_log
invalid value "ratio=abc" in "idem_retry_budget" directive



=== TEST 10: an empty ratio fails nginx -t
--- config
    location /t {
        idem on;
        idem_retry_budget ratio=;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fail;
    }
--- must_die
--- error_log
invalid value "ratio=" in "idem_retry_budget" directive



=== TEST 11: ratio is required
--- config
    location /t {
        idem on;
        idem_retry_budget min=5;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fail;
    }
--- must_die
--- error_log
"idem_retry_budget" needs "ratio="



=== TEST 12: a window longer than the 60 s kept fails nginx -t
--- config
    location /t {
        idem on;
        idem_retry_budget ratio=0.1 window=2m;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fail;
    }
--- must_die
--- error_log
invalid value "window=2m" in "idem_retry_budget" directive



=== TEST 13: an unknown parameter fails nginx -t
--- config
    location /t {
        idem on;
        idem_retry_budget ratio=0.1 burst=3;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fail;
    }
--- must_die
--- error_log
invalid parameter "burst=3" in "idem_retry_budget" directive



=== TEST 14: a budget where no location has "idem on": nginx starts, nothing changes
--- http_config
    idem_retry_budget ratio=0.2;
    idem_breaker;
--- config
    location /t {
        return 200 "plain\n";
    }
--- request
GET /t
--- response_body
plain
--- no_error_log
[error]
