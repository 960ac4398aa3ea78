# idem_breaker: when, within the window, at least min_calls calls finished
# and at least failures% of them failed (a final answer that idem_retry's
# on= names), the upstream's breaker opens: calls are answered 503
# upstream-unavailable with Retry-After, never sent.  After "open", probes
# go through: their success closes it, a failure opens it again.
# The upstream is /code/ok (200) and /code/fail (503) of the same server;
# X-Attempts shows whether a call reached it.

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): the breaker is the upstream's, kept across requests: a
# second run finds it open.

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: opens at exactly failures% of min_calls; then calls are answered, not sent
--- config
    location /t/ {
        idem on;
        idem_breaker failures=50% min_calls=4 open=10s;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
    location /code/ok {
        return 200 "ok\n";
    }
    location /code/fail {
        return 503;
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["GET /t/ok", "GET /t/fail", "GET /t/ok", "GET /t/fail", "GET /t/ok",
 "GET /metrics"]
--- more_headers
X-Call-Id: br-1
--- error_code eval
[200, 503, 200, 503, 503, 200]
--- response_headers eval
["X-Attempts: 1", "X-Attempts: 1", "X-Attempts: 1", "X-Attempts: 1",
 "X-Attempts: 0\nRetry-After: 10\nContent-Type: application/problem+json\nX-Call-Id: br-1\nCache-Control: no-store",
 ""]
--- response_body_like eval
["ok", "", "ok", "",
 '^\{"type":"urn:ngx-idem:problem:upstream-unavailable","title":"Upstream unavailable","status":503,"detail":"[^"]+","call_id":"br-1"\}$',
 qr/^idem_attempts_total 4\n.*^idem_breaker_rejected_total\{upstream="127\.0\.0\.1:$ENV{TEST_NGINX_SERVER_PORT}"\} 1\n^idem_breaker_state\{upstream="127\.0\.0\.1:$ENV{TEST_NGINX_SERVER_PORT}"\} 1\n/ms]
--- no_error_log
[error]



=== TEST 2: under min_calls it stays closed, whatever fails
--- config
    location /t/ {
        idem on;
        idem_breaker failures=50% min_calls=4 open=10s;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
    location /code/fail {
        return 503;
    }
--- request eval
["GET /t/fail", "GET /t/fail", "GET /t/fail", "GET /t/fail", "GET /t/fail"]
--- error_code eval
[503, 503, 503, 503, 503]
--- raw_response_headers_like eval
["X-Attempts: 1\r\n", "X-Attempts: 1\r\n", "X-Attempts: 1\r\n",
 "X-Attempts: 1\r\n", "X-Attempts: 0\r\n"]
--- no_error_log
[error]



=== TEST 3: under failures% it stays closed
--- config
    location /t/ {
        idem on;
        idem_breaker failures=50% min_calls=4 open=10s;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
    location /code/ok {
        return 200 "ok\n";
    }
    location /code/fail {
        return 503;
    }
--- request eval
["GET /t/ok", "GET /t/ok", "GET /t/ok", "GET /t/fail", "GET /t/fail",
 "GET /t/ok"]
--- error_code eval
[200, 200, 200, 503, 503, 200]
--- raw_response_headers_like eval
["X-Attempts: 1\r\n", "X-Attempts: 1\r\n", "X-Attempts: 1\r\n",
 "X-Attempts: 1\r\n", "X-Attempts: 1\r\n", "X-Attempts: 1\r\n"]
--- no_error_log
[error]



=== TEST 4: a call is judged by its final answer, not by its attempts
--- config
    location /t/ {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=1ms;
        idem_breaker failures=100% min_calls=3 open=10s;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
    location /code/fail {
        return 503;
    }
--- request eval
["GET /t/fail", "GET /t/fail", "GET /t/fail", "GET /t/fail"]
--- error_code eval
[503, 503, 503, 503]
--- raw_response_headers_like eval
["X-Attempts: 3\r\n", "X-Attempts: 3\r\n", "X-Attempts: 3\r\n",
 "X-Attempts: 0\r\n"]
--- no_error_log
[error]



=== TEST 5: only failures that idem_retry on= names count: 500 is not one by default
--- http_config
    upstream a {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
    upstream b {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
--- config
    idem_breaker failures=50% min_calls=2 open=10s;
    location /a/ {
        idem on;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://a/code/;
    }
    location /b/ {
        idem on;
        idem_retry 1 on=http_500;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://b/code/;
    }
    location /code/err {
        return 500;
    }
--- request eval
["GET /a/err", "GET /a/err", "GET /a/err", "GET /b/err", "GET /b/err",
 "GET /b/err"]
--- error_code eval
[500, 500, 500, 500, 500, 503]
--- raw_response_headers_like eval
["X-Attempts: 1\r\n", "X-Attempts: 1\r\n", "X-Attempts: 1\r\n",
 "X-Attempts: 1\r\n", "X-Attempts: 1\r\n", "X-Attempts: 0\r\n"]
--- no_error_log
[error]



=== TEST 6: half-open: a probe that fails opens it again for "open"
--- config
    location /t/ {
        idem on;
        idem_breaker failures=50% min_calls=2 open=1s;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
    location /code/fail {
        return 503;
    }
    location /pause {
        echo_sleep 1.2;
        echo ok;
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["GET /t/fail", "GET /t/fail", "GET /t/fail", "GET /pause", "GET /metrics",
 "GET /t/fail", "GET /t/fail", "GET /metrics"]
--- error_code eval
[503, 503, 503, 200, 200, 503, 503, 200]
--- response_headers eval
["X-Attempts: 1", "X-Attempts: 1", "X-Attempts: 0\nRetry-After: 1", "", "",
 "X-Attempts: 1\n!Retry-After", "X-Attempts: 0\nRetry-After: 1", ""]
--- response_body_like eval
["", "", "upstream-unavailable", "ok", qr/^idem_breaker_state\{[^}]+\} 2$/m,
 "", "upstream-unavailable", qr/^idem_breaker_state\{[^}]+\} 1$/m]
--- no_error_log
[error]



=== TEST 7: half-open: probes that succeed close it, counted afresh
--- config
    location /t/ {
        idem on;
        idem_breaker failures=50% min_calls=2 open=1s probes=2;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
    location /code/ok {
        return 200 "ok\n";
    }
    location /code/fail {
        return 503;
    }
    location /pause {
        echo_sleep 1.2;
        echo ok;
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["GET /t/fail", "GET /t/fail", "GET /t/ok", "GET /pause", "GET /t/ok",
 "GET /metrics", "GET /t/ok", "GET /metrics", "GET /t/fail", "GET /t/ok"]
--- error_code eval
[503, 503, 503, 200, 200, 200, 200, 200, 503, 200]
--- raw_response_headers_like eval
["X-Attempts: 1\r\n", "X-Attempts: 1\r\n", "X-Attempts: 0\r\n", "",
 "X-Attempts: 1\r\n", "", "X-Attempts: 1\r\n", "", "X-Attempts: 1\r\n",
 "X-Attempts: 1\r\n"]
--- response_body_like eval
["", "", "", "ok", "ok", qr/^idem_breaker_state\{[^}]+\} 2$/m, "ok",
 qr/^idem_breaker_state\{[^}]+\} 0$/m, "", "ok"]
--- no_error_log
[error]



=== TEST 8: per upstream{} block: one open breaker leaves the other upstream alone
--- http_config
    upstream a {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
    upstream b {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
--- config
    idem_breaker failures=50% min_calls=2 open=10s;
    location /a/ {
        idem on;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://a/code/;
    }
    location /b/ {
        idem on;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://b/code/;
    }
    location /code/ok {
        return 200 "ok\n";
    }
    location /code/fail {
        return 503;
    }
--- request eval
["GET /a/fail", "GET /a/fail", "GET /a/ok", "GET /b/ok"]
--- error_code eval
[503, 503, 503, 200]
--- raw_response_headers_like eval
["X-Attempts: 1\r\n", "X-Attempts: 1\r\n", "X-Attempts: 0\r\n",
 "X-Attempts: 1\r\n"]
--- no_error_log
[error]



=== TEST 9: error_page does not replace the module's own answer
--- config
    location /t/ {
        idem on;
        idem_breaker failures=50% min_calls=1 open=10s;
        error_page 503 /oops;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
    location /code/fail {
        return 503;
    }
    location /oops {
        return 200 "oops\n";
    }
--- request eval
["GET /t/fail", "GET /t/fail"]
--- error_code eval
[503, 503]
--- response_body_like eval
["503 Service Temporarily Unavailable", "upstream-unavailable"]
--- no_error_log
[error]



=== TEST 10: a refused call is recorded FAILED, with no attempt sent
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t/ {
        idem on;
        idem_record on;
        idem_breaker failures=50% min_calls=1 open=10s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
    location /code/fail {
        return 503;
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /t/fail", "GET /t/fail", "GET /calls/br-rec-2"]
--- more_headers eval
["X-Call-Id: br-rec-1", "X-Call-Id: br-rec-2", ""]
--- error_code eval
[503, 503, 200]
--- response_body_like eval
["", "upstream-unavailable",
 '^\{"call_id":"br-rec-2",.*"state":"FAILED",.*"final_status":503,"executions":1,"attempts":\[\]\}$']
--- no_error_log
[error]



=== TEST 11: dedupe: a refused call releases its claim; the same id runs once the breaker closes
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t/ {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_breaker failures=50% min_calls=1 open=1s;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
    location /code/ok {
        return 200 "ok\n";
    }
    location /code/fail {
        return 503;
    }
    location /pause {
        echo_sleep 1.2;
        echo ok;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /t/fail", "GET /t/ok", "GET /pause", "GET /t/ok"]
--- more_headers eval
["X-Call-Id: br-dd-1", "X-Call-Id: br-dd-2", "", "X-Call-Id: br-dd-2"]
--- error_code eval
[503, 503, 200, 200]
--- raw_response_headers_like eval
["X-Attempts: 1\r\n", "X-Attempts: 0\r\n", "", "X-Attempts: 1\r\n"]
--- raw_response_headers_unlike eval
["Idempotent-Replayed", "Idempotent-Replayed", "Idempotent-Replayed",
 "Idempotent-Replayed"]
--- response_body_like eval
["", "upstream-unavailable", "ok", "^ok\n\$"]
--- no_error_log
[error]



=== TEST 12: a POST is refused once its body was read
--- config
    location /t/ {
        idem on;
        idem_breaker failures=50% min_calls=1 open=10s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
    location /code/fail {
        return 503;
    }
--- request eval
["POST /t/fail\npay=1", "POST /t/fail\npay=2"]
--- error_code eval
[503, 503]
--- response_body_like eval
["", "upstream-unavailable"]
--- no_error_log
[error]



=== TEST 13: bad parameters fail nginx -t
--- config
    location /t/ {
        idem on;
        idem_breaker failures=0%;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
--- must_die
--- error_log
invalid value "failures=0" in "idem_breaker" directive, "failures" must be from 1 to 100



=== TEST 14: probes=0 fails nginx -t
--- config
    location /t/ {
        idem on;
        idem_breaker probes=0;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
--- must_die
--- error_log
invalid value "probes=0" in "idem_breaker" directive



=== TEST 15: the directive alone: failures=50% min_calls=20 open=5s
--- config
    location /t/ {
        idem on;
        idem_breaker;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
    location /code/fail {
        return 503;
    }
--- request eval
[("GET /t/fail") x 21]
--- error_code eval
[(503) x 21]
--- raw_response_headers_like eval
[("X-Attempts: 1\r\n") x 20, "Retry-After: 5\r\n"]
--- no_error_log
[error]



=== TEST 16: HTTP/2 clients: the same answer (nginx's grpc_pass is the h2 client)
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location /t/ {
            idem on;
            idem_breaker failures=50% min_calls=1 open=10s;
            proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
        }
    }
--- config
    location /t/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
    location /code/fail {
        return 503;
    }
--- request eval
["GET /t/fail", "POST /t/fail\npay=1", "GET /t/fail"]
--- more_headers
X-Call-Id: br-h2
--- error_code eval
[503, 503, 503]
--- response_headers_like eval
["", "Retry-After: 10", "Retry-After: (10|9)"]
--- response_body_like eval
["Service Temporarily Unavailable",
 '"type":"urn:ngx-idem:problem:upstream-unavailable".*"call_id":"br-h2"',
 '"type":"urn:ngx-idem:problem:upstream-unavailable".*"call_id":"br-h2"']
--- no_error_log
[error]



=== TEST 17: connect errors are failures ("error" in on=); a body still streaming (proxy_request_buffering off) is not waited for
--- config
    location /t {
        idem on;
        idem_breaker failures=50% min_calls=2 open=10s;
        proxy_request_buffering off;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:1;
    }
--- request eval
["POST /t\n" . ("x" x 65536), "POST /t\n" . ("x" x 65536),
 "POST /t\n" . ("x" x 65536)]
--- error_code eval
[502, 502, 503]
--- raw_response_headers_like eval
["X-Attempts: 1\r\n", "X-Attempts: 1\r\n", "X-Attempts: 0\r\n"]
--- response_body_like eval
["Bad Gateway", "Bad Gateway", "upstream-unavailable"]
--- no_error_log
[alert]
[crit]



=== TEST 18: a cache miss refused by the breaker leaves the cache node free (proxy_cache_lock)
--- http_config
    proxy_cache_path $TEST_NGINX_SERVER_ROOT/cache keys_zone=storm:1m;
--- config
    location /t/ {
        idem on;
        idem_breaker failures=50% min_calls=1 open=10s;
        proxy_cache storm;
        proxy_cache_valid any 1m;
        proxy_cache_lock on;
        proxy_cache_lock_timeout 2s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
    location /code/fail {
        return 503;
    }
    location /code/ok {
        return 200 "ok\n";
    }
--- init
system("rm -rf $ENV{TEST_NGINX_SERVER_ROOT}/cache");
--- request eval
["GET /t/fail", "GET /t/ok", "GET /t/ok", "GET /t/fail"]
--- timeout: 1s
--- error_code eval
[503, 503, 503, 503]
--- response_body_like eval
["Service Temporarily Unavailable", "upstream-unavailable",
 "upstream-unavailable", "Service Temporarily Unavailable"]
--- no_error_log
[alert]
[crit]
[error]



=== TEST 19: the breaker's window slides: failures older than it no longer count
--- config
    location /t/ {
        idem on;
        idem_breaker failures=100% min_calls=2 window=1s open=10s;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/code/;
    }
    location /code/fail {
        return 503;
    }
    location /pause {
        echo_sleep 1.2;
        echo ok;
    }
--- request eval
["GET /t/fail", "GET /pause", "GET /t/fail", "GET /t/fail", "GET /t/fail"]
--- error_code eval
[503, 200, 503, 503, 503]
--- raw_response_headers_like eval
["X-Attempts: 1\r\n", "", "X-Attempts: 1\r\n", "X-Attempts: 1\r\n",
 "X-Attempts: 0\r\n"]
--- no_error_log
[error]
