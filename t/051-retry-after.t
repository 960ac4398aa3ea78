# Retry-After from a 429/503 on an idempotent route.  With a budget
# (idem_deadline or the caller's), the wait must fit in it; without one,
# it must not be longer than 10 s (or max_backoff, when that is longer).
# Otherwise there is no further attempt and the client gets the upstream's
# own answer at once, with its Retry-After, instead of a call parked on a
# socket for 30 s or weeks.

use POSIX qw(strftime);

# an HTTP date three weeks ahead, for the backend of TEST 3
BEGIN {
    $ENV{TEST_NGINX_RETRY_DATE} = strftime('%a, %d %b %Y %H:%M:%S GMT',
                                           gmtime(time + 21 * 86400));
}

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): util/backend.pl fails the first N attempts of each call
# id; with fixed ids a second run finds them spent and is not retried.

no_long_string();
run_tests();

__DATA__

=== TEST 1: no budget, Retry-After: 30: no retry, the upstream's 503 at once
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=1ms;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1/30;
    }
    location /log {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/log/ra-30;
    }
--- request eval
["GET /t", "GET /log"]
--- more_headers
X-Call-Id: ra-30
--- timeout: 2
--- error_code eval
[503, 200]
--- response_headers eval
["X-Attempts: 1\nRetry-After: 30", ""]
--- response_body_like eval
["\\Afailing 1\n\\z", "\\An=1 [^\n]*\n\\z"]
--- no_error_log
[error]



=== TEST 2: no budget, a 429 with Retry-After: 86400: no retry
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=1ms max_backoff=10s on=http_429,http_503;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/429/1/86400;
    }
--- request
GET /t
--- more_headers
X-Call-Id: ra-day
--- timeout: 2
--- error_code: 429
--- response_headers
X-Attempts: 1
Retry-After: 86400
--- error_log
wait of 86400000 ms is longer than a call without a budget may wait
--- no_error_log
[error]



=== TEST 3: no budget, Retry-After: an HTTP date three weeks ahead: no retry
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        location / {
            add_header Retry-After "$TEST_NGINX_RETRY_DATE" always;
            return 503 "later\n";
        }
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=1ms;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request
GET /t
--- more_headers
X-Call-Id: ra-date
--- timeout: 2
--- error_code: 503
--- response_headers_like
X-Attempts: 1
Retry-After: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT
--- response_body
later
--- no_error_log
[error]



=== TEST 4: no budget, a short Retry-After over max_backoff is waited for
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=1ms max_backoff=10ms;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1/1;
    }
--- request
GET /t
--- more_headers
X-Call-Id: ra-wait
--- timeout: 4
--- response_headers
X-Attempts: 2
--- response_body_like chomp
\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*\n\z
--- no_error_log
[error]



=== TEST 5: with a budget, the budget decides: a Retry-After over max_backoff that fits is waited for
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_deadline 5s;
        idem_retry 2 backoff=1ms max_backoff=100ms;
        add_header X-Attempts $idem_attempts always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1/1;
    }
--- request
GET /t
--- more_headers
X-Call-Id: ra-budget
--- timeout: 4
--- response_headers
X-Attempts: 2
--- response_body_like chomp
\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*\n\z
--- no_error_log
[error]
