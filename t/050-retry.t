# Retries: only on routes marked idempotent, same call id on every attempt,
# per-attempt headers, backoff without blocking, inside the budget.
# util/backend.pl is the upstream: it fails a call id's first K requests
# and keeps a log of each call id's attempts (GET /log/<id>).

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): util/backend.pl fails the first N attempts of each call
# id; with fixed ids a second run finds them spent and is not retried.

no_long_string();
run_tests();

__DATA__

=== TEST 1: idempotent: 503, 503, then 200; same id, attempts 1-3, new spans
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=10ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/2;
    }
--- request
GET /t
--- more_headers
X-Call-Id: r1-ok
X-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736
--- response_headers
X-Call-Id: r1-ok
--- response_body_like chomp
\An=1 attempt=1 deadline=- tp=00-4bf92f3577b34da6a3ce929d0e0e4736-([0-9a-f]{16})-00 method=GET body=\nn=2 attempt=2 deadline=- tp=00-4bf92f3577b34da6a3ce929d0e0e4736-(?!\1)([0-9a-f]{16})-00 method=GET body=\nn=3 attempt=3 deadline=- tp=00-4bf92f3577b34da6a3ce929d0e0e4736-(?!\1)(?!\2)[0-9a-f]{16}-00 method=GET body=\n\z
--- no_error_log
[error]



=== TEST 2: not idempotent (the default): one attempt, whatever proxy_next_upstream says
--- http_config
    upstream two {
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /t {
        idem on;
        proxy_next_upstream error timeout http_503 non_idempotent;
        proxy_pass http://two/status/503/2;
    }
    location /log {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/log/r2-once;
    }
--- request eval
["GET /t", "GET /log"]
--- more_headers
X-Call-Id: r2-once
--- error_code eval
[503, 200]
--- response_body_like eval
["^failing 1\n\$", "^n=1 attempt=1 deadline=- tp=00-[0-9a-f]{32}-[0-9a-f]{16}-00 method=GET body=\n"]
--- no_error_log
[error]



=== TEST 3: not idempotent, across an upstream{} whose first server is dead
--- http_config
    upstream two {
        server 127.0.0.1:1;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /t {
        idem on;
        proxy_next_upstream error timeout;
        proxy_pass http://two/ok;
    }
--- request
POST /t
pay=1
--- more_headers
X-Call-Id: r3-dead
--- error_code: 502
--- error_log
connect() failed (111: Connection refused)
--- no_error_log
[alert]



=== TEST 4: idem_retry_unsent: one more attempt when nothing was sent
--- http_config
    upstream two {
        server 127.0.0.1:1;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /t {
        idem on;
        idem_retry_unsent on;
        proxy_pass http://two/ok;
    }
--- request
POST /t
pay=1
--- more_headers
X-Call-Id: r4-unsent
--- response_body_like chomp
^n=1 attempt=2 deadline=- tp=00-[0-9a-f]{32}-[0-9a-f]{16}-00 method=POST body=pay=1\n$
--- error_log
connect() failed (111: Connection refused)
--- no_error_log
[alert]



=== TEST 5: idem_retry_unsent: no second attempt once the request was sent
--- http_config
    upstream two {
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /t {
        idem on;
        idem_retry_unsent on;
        proxy_next_upstream error timeout non_idempotent;
        proxy_pass http://two/reset/1;
    }
    location /log {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/log/r5-sent;
    }
--- request eval
["POST /t\npay=1", "GET /log"]
--- more_headers
X-Call-Id: r5-sent
--- error_code eval
[502, 200]
--- response_body_like eval
["Bad Gateway", "\\An=1 attempt=1 [^\\n]*\\n\\z"]
--- no_error_log
[alert]



=== TEST 6: idempotent POST: the same body is sent again after a reset
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/reset/2;
    }
--- request
POST /t
{"amount":100}
--- more_headers
X-Call-Id: r6-post
--- response_body_like chomp
\An=1 attempt=1 [^\n]* method=POST body=\{"amount":100\}\nn=2 attempt=2 [^\n]* method=POST body=\{"amount":100\}\nn=3 attempt=3 [^\n]* method=POST body=\{"amount":100\}\n\z
--- error_log
Connection reset by peer
--- no_error_log
[alert]



=== TEST 7: idempotent, attempts used up: the upstream's own 503
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=5ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/5;
    }
--- request
GET /t
--- more_headers
X-Call-Id: r7-used-up
--- error_code: 503
--- response_body
failing 2
--- no_error_log
[error]



=== TEST 8: idempotent, errors on every attempt: 502 after N attempts
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:1;
    }
--- request
GET /t
--- error_code: 502
--- response_headers
X-Attempts: 4
--- error_log
connect() failed (111: Connection refused)
--- no_error_log
[alert]



=== TEST 9: on= limits the failures that are retried
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms on=error,timeout;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1;
    }
--- request
GET /t
--- more_headers
X-Call-Id: r9-on
--- error_code: 503
--- response_headers
X-Attempts: 1
--- no_error_log
[error]



=== TEST 10: http_429 is retried when listed
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=5ms on=http_429;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/429/1;
    }
--- request
GET /t
--- more_headers
X-Call-Id: r10-429
--- response_headers
X-Attempts: 2
--- response_body_like chomp
\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*\n\z
--- no_error_log
[error]



=== TEST 11: a single-server upstream{} is tried again, more times than it has servers
--- http_config
    upstream one {
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass http://one/status/502/3;
    }
--- request
GET /t
--- more_headers
X-Call-Id: r11-single
--- response_body_like chomp
\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*\nn=3 attempt=3 [^\n]*\nn=4 attempt=4 [^\n]*\n\z
--- no_error_log
[error]



=== TEST 12: an upstream{} of two, one dead: the call succeeds
--- http_config
    upstream two {
        server 127.0.0.1:1;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        proxy_pass http://two/ok;
    }
--- request
GET /t
--- more_headers
X-Call-Id: r12-two
--- response_body_like chomp
\An=1 attempt=2 [^\n]*\n\z
--- error_log
connect() failed (111: Connection refused)
--- no_error_log
[alert]



=== TEST 13: more attempts than servers go round the upstream{} again
--- http_config
    upstream two {
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 5 backoff=5ms;
        proxy_pass http://two/status/503/4;
    }
--- request
GET /t
--- more_headers
X-Call-Id: r13-round
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\nn=3 [^\n]*\nn=4 [^\n]*\nn=5 attempt=5 [^\n]*\n\z
--- no_error_log
[error]



=== TEST 14: an unbuffered body that was sent is not sent again
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        proxy_request_buffering off;
        proxy_http_version 1.1;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/reset/1;
    }
--- request eval
"POST /t\n" . ("a" x 65536)
--- more_headers
X-Call-Id: r14-unbuffered
--- error_code: 502
--- response_headers
X-Attempts: 1
--- no_error_log
[alert]



=== TEST 15: proxy_pass with a variable naming no upstream{}: one attempt, said in the log
--- config
    location /t {
        idem on;
        idem_idempotent on;
        set $backend 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        proxy_pass http://$backend/status/503/1;
    }
--- request
GET /t
--- more_headers
X-Call-Id: r15-var
--- error_code: 503
--- error_log
is not an upstream{} block or host:port
--- no_error_log
[error]



=== TEST 16: a proxy_pass variable naming an upstream{} is retried
--- http_config
    upstream named {
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=5ms;
        set $backend named;
        proxy_pass http://$backend/status/503/1;
    }
--- request
GET /t
--- more_headers
X-Call-Id: r16-named
--- response_body_like chomp
\An=1 [^\n]*\nn=2 attempt=2 [^\n]*\n\z
--- no_error_log
[error]
is not an upstream{} block



=== TEST 17: the worker serves other requests during a backoff (Retry-After)
--- http_config
    log_format timing 'TIMING $uri $status $request_time';
--- config
    location /both {
        echo_reset_timer;
        echo_location_async /slow;
        echo_location /fast;
        echo "fast done at $echo_timer_elapsed";
    }
    location /slow {
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/retry;
    }
    location /fast {
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/quick;
    }
    location /quick {
        return 200 "quick\n";
    }
    location /retry {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=1ms;
        access_log logs/error.log timing;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1/1;
    }
--- request
GET /both
--- more_headers
X-Call-Id: r17-backoff
--- timeout: 4
--- response_body_like chomp
\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*\nquick\nfast done at 0\.[0-4]\d*\n\z
--- error_log eval
qr{TIMING /retry 200 (?:1\.\d+|2\.\d+)}
--- no_error_log
[error]



=== TEST 18: a Retry-After that does not fit in the budget: the upstream's own 503
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_deadline 800ms;
        idem_retry 3 backoff=1ms;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1/5;
    }
--- request
GET /t
--- more_headers
X-Call-Id: r18-too-late
--- error_code: 503
--- response_headers
X-Attempts: 1
Retry-After: 5
--- response_body
failing 1
--- no_error_log
[error]



=== TEST 19: the budget ends the call across attempts
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_deadline 400ms;
        idem_retry 5 backoff=0 per_try_timeout=300ms;
        proxy_read_timeout 60s;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/2000/9;
    }
--- request
GET /t
--- more_headers
X-Call-Id: r19-across
--- timeout: 1.5
--- error_code: 504
--- response_headers
X-Attempts: 2
--- no_error_log
[alert]



=== TEST 20: a client that goes away during a backoff: 499, nothing leaks
--- http_config
    log_format timing 'TIMING $uri $status';
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=1ms max_backoff=5s;
        access_log logs/error.log timing;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1/2;
    }
--- request
GET /t
--- more_headers
X-Call-Id: r20-gone
--- timeout: 0.4
--- abort
--- ignore_response
--- wait: 0.3
--- error_log
TIMING /t 499
--- no_error_log
[alert]
[crit]



=== TEST 21: with keepalive connections to the upstream
--- http_config
    upstream ka {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
        keepalive 4;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://ka/flaky;
    }
    location /flaky {
        return 503;
    }
--- request
GET /t
--- error_code: 503
--- response_headers
X-Attempts: 3
--- no_error_log
[alert]



=== TEST 22: a client that goes away during an attempt: 499, nothing leaks
--- http_config
    log_format timing 'TIMING $uri $status';
--- config
    location /t {
        idem on;
        idem_idempotent on;
        access_log logs/error.log timing;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1500/9;
    }
--- request
GET /t
--- more_headers
X-Call-Id: r22-gone-mid
--- timeout: 0.4
--- abort
--- ignore_response
--- wait: 0.3
--- error_log
TIMING /t 499
--- no_error_log
[alert]
[crit]



=== TEST 23: a redirect to a location without "idem on" keeps the call's retry rule
--- http_config
    upstream two {
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /t {
        idem on;
        error_page 418 = @plain;
        return 418;
    }
    location @plain {
        proxy_next_upstream error timeout http_503;
        rewrite ^ /status/503/1 break;
        proxy_pass http://two;
    }
    location /log {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/log/r23-plain;
    }
--- request eval
["GET /t", "GET /log"]
--- more_headers
X-Call-Id: r23-plain
--- error_code eval
[503, 200]
--- response_body_like eval
["\\Afailing 1\n\\z", "\\An=1 attempt=1 [^\n]*\n\\z"]
--- no_error_log
[error]
