# A call that reaches an upstream through error_page (a named location or
# a URI) or X-Accel-Redirect: every upstream it reaches is wrapped,
# recorded and counted as sent when it was, and the call's retry rule
# applies there too.  On a dedupe route, a duplicate is then answered from
# the record, never run again.

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): dedupe of fixed call ids: the second run's first call is
# a replay of the first run's (--- init flushes Redis once per block).

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: dedupe, error_page to a named location: duplicates are replayed, not run again
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        error_page 502 = @fallback;
        proxy_pass http://127.0.0.1:1;
    }
    location @fallback {
        rewrite ^ /ok break;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1", "POST /pay\nx=1", "GET /log/rd-1",
 "GET /calls/rd-1"]
--- more_headers eval
["X-Call-Id: rd-1", "X-Call-Id: rd-1", "X-Call-Id: rd-1", "", ""]
--- error_code eval
[200, 200, 200, 200, 200]
--- response_headers eval
['!Idempotent-Replayed', 'Idempotent-Replayed: true',
 'Idempotent-Replayed: true', '', '']
--- response_body_like eval
['\An=1 attempt=2 [^\n]*method=POST body=x=1\n\z',
 '\An=1 attempt=2 [^\n]*method=POST body=x=1\n\z',
 '\An=1 attempt=2 [^\n]*method=POST body=x=1\n\z',
 '\An=1 attempt=2 [^\n]*\n\z',
 '"state":"SUCCESS",.*"final_status":200,"executions":1,"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"connect_error","sent":false,[^}]*\},\{"execution":1,"n":2,[^}]*"outcome":"ok","sent":true,"status":200,[^}]*\}\]\}$']
--- no_error_log
[alert]
[crit]
signal



=== TEST 2: dedupe, error_page to a URI: the fallback's answer is the call's, replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        error_page 502 /fallback;
        proxy_pass http://127.0.0.1:1;
    }
    location /fallback {
        internal;
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["PUT /pay\nx=2", "PUT /pay\nx=2", "PUT /pay\nx=2", "GET /log/rd-2"]
--- more_headers eval
["X-Call-Id: rd-2", "X-Call-Id: rd-2", "X-Call-Id: rd-2", ""]
--- error_code eval
[502, 502, 502, 200]
--- response_headers eval
['!Idempotent-Replayed', 'Idempotent-Replayed: true',
 'Idempotent-Replayed: true', '']
--- response_body_like eval
['\An=1 attempt=2 [^\n]*method=GET body=x=2\n\z',
 '\An=1 attempt=2 [^\n]*method=GET body=x=2\n\z',
 '\An=1 attempt=2 [^\n]*method=GET body=x=2\n\z',
 '\An=1 attempt=2 [^\n]*\n\z']
--- no_error_log
[alert]
[crit]
signal



=== TEST 3: dedupe, X-Accel-Redirect: the second upstream is an attempt of the call
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/accel;
    }
    location /accel {
        add_header X-Accel-Redirect /internal/ok;
        return 200 "accel\n";
    }
    location /internal/ {
        internal;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=3", "POST /pay\nx=3", "GET /log/rd-3", "GET /calls/rd-3"]
--- more_headers eval
["X-Call-Id: rd-3", "X-Call-Id: rd-3", "", ""]
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
['!Idempotent-Replayed', 'Idempotent-Replayed: true', '', '']
--- response_body_like eval
['\An=1 attempt=2 [^\n]*\n\z',
 '\An=1 attempt=2 [^\n]*\n\z',
 '\An=1 attempt=2 [^\n]*\n\z',
 '"state":"SUCCESS",.*"executions":1,"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"ok","sent":true,"status":200,[^}]*\},\{"execution":1,"n":2,[^}]*"outcome":"ok","sent":true,"status":200,[^}]*\}\]\}$']
--- no_error_log
[error]
[alert]
signal



=== TEST 4: error_page to a named location keeps the call's retry rule: idempotent retries there
--- http_config
    upstream flaky {
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        error_page 418 = @flaky;
        return 418;
    }
    location @flaky {
        rewrite ^ /status/503/2 break;
        proxy_pass http://flaky;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /t\nx=4", "GET /log/rd-4"]
--- more_headers eval
["X-Call-Id: rd-4", ""]
--- error_code eval
[200, 200]
--- response_body_like eval
['\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*\nn=3 attempt=3 [^\n]*\n\z',
 '\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*\nn=3 attempt=3 [^\n]*\n\z']
--- no_error_log
[error]
[alert]
signal
