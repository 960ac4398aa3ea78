# A call that reaches a second upstream (error_page to a named location,
# X-Accel-Redirect) counts there in that upstream's own retry budget and
# breaker: the first upstream's part of the call is judged when the call
# leaves it, by the answer it gave.  "primary" and "fallback" are two
# upstream{} blocks in front of locations of this same server: each has its
# own node, whatever its address.

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): the breakers are the upstreams', kept across requests: a
# second run finds them open.

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: a healthy primary (404) and a sick fallback (503): only the fallback's breaker opens
--- http_config
    upstream primary {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
    upstream fallback {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
--- config
    location /brk/ {
        idem on;
        idem_breaker failures=50% min_calls=2 window=10s open=30s;
        proxy_pass http://primary/code/missing;
        proxy_intercept_errors on;
        error_page 404 = @fb;
    }
    location @fb {
        idem on;
        idem_breaker failures=50% min_calls=2 window=10s open=30s;
        add_header X-Attempts $idem_attempts always;
        rewrite ^ /code/fail break;
        proxy_pass http://fallback;
    }
    location /code/missing {
        return 404;
    }
    location /code/fail {
        return 503;
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["GET /brk/1", "GET /brk/2", "GET /brk/3", "GET /metrics"]
--- error_code eval
[503, 503, 503, 200]
--- raw_response_headers_like eval
["X-Attempts: 2\r\n", "X-Attempts: 2\r\n",
 "Retry-After: 30\r\nCache-Control: no-store\r\nX-Attempts: 1\r\n", ""]
--- response_body_like eval
["", "",
 '"type":"urn:ngx-idem:problem:upstream-unavailable"',
 qr/^idem_breaker_rejected_total\{upstream="primary"\} 0\n^idem_breaker_state\{upstream="primary"\} 0\n.*^idem_breaker_rejected_total\{upstream="fallback"\} 1\n^idem_breaker_state\{upstream="fallback"\} 1\n/ms]
--- no_error_log
[error]
the breaker of upstream "primary"



=== TEST 2: a sick primary (503) and a healthy fallback: the primary's breaker opens
--- http_config
    upstream primary {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
    upstream fallback {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
--- config
    location /brk/ {
        idem on;
        idem_breaker failures=50% min_calls=2 window=10s open=30s;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://primary/code/fail;
        proxy_intercept_errors on;
        error_page 503 = @fb;
    }
    location @fb {
        idem on;
        idem_breaker failures=50% min_calls=2 window=10s open=30s;
        add_header X-Attempts $idem_attempts always;
        rewrite ^ /code/ok break;
        proxy_pass http://fallback;
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
["GET /brk/1", "GET /brk/2", "GET /brk/3", "GET /metrics"]
--- error_code eval
[200, 200, 503, 200]
--- raw_response_headers_like eval
["X-Attempts: 2\r\n", "X-Attempts: 2\r\n",
 "Retry-After: 30\r\nCache-Control: no-store\r\nX-Attempts: 0\r\n", ""]
--- response_body_like eval
["ok", "ok",
 '"type":"urn:ngx-idem:problem:upstream-unavailable"',
 qr/^idem_breaker_rejected_total\{upstream="primary"\} 1\n^idem_breaker_state\{upstream="primary"\} 1\n.*^idem_breaker_rejected_total\{upstream="fallback"\} 0\n^idem_breaker_state\{upstream="fallback"\} 0\n/ms]
--- no_error_log
[error]
the breaker of upstream "fallback"



=== TEST 3: the fallback's retries spend the fallback's budget, its first attempt is a call there
--- http_config
    upstream primary {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
    upstream fallback {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
--- config
    location /bud/ {
        idem on;
        idem_retry_budget ratio=0.5 min=0;
        proxy_pass http://primary/code/missing;
        proxy_intercept_errors on;
        error_page 404 = @fb;
    }
    location @fb {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=1ms;
        idem_retry_budget ratio=0.5 min=0;
        add_header X-Attempts $idem_attempts always;
        rewrite ^ /code/fail break;
        proxy_pass http://fallback;
    }
    location /code/missing {
        return 404;
    }
    location /code/fail {
        return 503;
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["GET /bud/1", "GET /bud/2", "GET /bud/3", "GET /bud/4", "GET /metrics"]
--- error_code eval
[503, 503, 503, 503, 200]
--- raw_response_headers_like eval
["X-Attempts: 2\r\n", "X-Attempts: 3\r\n", "X-Attempts: 2\r\n",
 "X-Attempts: 3\r\n", ""]
--- response_body_like eval
["", "", "", "",
 qr/^idem_retry_budget_exhausted_total\{upstream="primary"\} 0\n.*^idem_retry_budget_exhausted_total\{upstream="fallback"\} 2\n/ms]
--- no_error_log
[error]



=== TEST 4: X-Accel-Redirect to a location of another upstream: each counts its own part
--- http_config
    upstream primary {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
    upstream fallback {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
--- config
    location /xa/ {
        idem on;
        idem_breaker failures=50% min_calls=2 window=10s open=30s;
        proxy_pass http://primary/code/redirect;
    }
    location /internal/ {
        internal;
        idem on;
        idem_breaker failures=50% min_calls=2 window=10s open=30s;
        proxy_pass http://fallback/code/fail;
    }
    location /code/redirect {
        add_header X-Accel-Redirect /internal/x;
        return 200;
    }
    location /code/fail {
        return 503;
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["GET /xa/1", "GET /xa/2", "GET /xa/3", "GET /metrics"]
--- error_code eval
[503, 503, 503, 200]
--- response_body_like eval
["", "",
 '"type":"urn:ngx-idem:problem:upstream-unavailable"',
 qr/^idem_breaker_rejected_total\{upstream="primary"\} 0\n^idem_breaker_state\{upstream="primary"\} 0\n.*^idem_breaker_rejected_total\{upstream="fallback"\} 1\n^idem_breaker_state\{upstream="fallback"\} 1\n/ms]
--- no_error_log
[error]
the breaker of upstream "primary"
