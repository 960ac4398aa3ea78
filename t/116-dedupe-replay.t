# idem_dedupe_replay: which upstream answers a duplicate gets replayed.
# An answer outside the list is not stored: the claim is released when the
# call ends, so the next resend runs as a new execution; a call that ended
# UNKNOWN is never released.  The backend (util/backend.pl) answers
# /status/CODE/K with CODE to the first K requests of a call id, then 200,
# its body the call's log ("n=<request number> ...").

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): dedupe of fixed call ids: the second run's first call is
# a replay of the first run's (--- init flushes Redis once per block).

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: 2xx only: a 500 is not kept, the resend runs again (200), and that one is replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_replay 2xx;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/500/1;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1", "POST /pay\nx=1"]
--- more_headers
X-Call-Id: rp-1
--- error_code eval
[500, 200, 200]
--- raw_response_headers_unlike eval
["Idempotent-Replayed", "Idempotent-Replayed", "^\$"]
--- response_headers_like eval
["", "", "Idempotent-Replayed: true"]
--- response_body_like eval
["", "\nn=2 attempt=1 ", "\nn=2 attempt=1 "]
--- no_error_log
[error]



=== TEST 2: the default keeps every answer: the 500 is replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/500/1;
    }
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1"]
--- more_headers
X-Call-Id: rp-2
--- error_code eval
[500, 500]
--- response_headers_like eval
["", "Idempotent-Replayed: true"]
--- no_error_log
[error]



=== TEST 3: classes and codes together: 409 kept, 404 not
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /a {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_replay 2xx 409 422;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/409/1;
    }
    location /b {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_replay 2xx 409 422;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/404/1;
    }
--- request eval
["POST /a\nx=1", "POST /a\nx=1", "POST /b\nx=1", "POST /b\nx=1"]
--- more_headers eval
["X-Call-Id: rp-3a", "X-Call-Id: rp-3a", "X-Call-Id: rp-3b",
 "X-Call-Id: rp-3b"]
--- error_code eval
[409, 409, 404, 200]
--- response_headers_like eval
["", "Idempotent-Replayed: true", "", ""]
--- response_body_like eval
["", "", "", "\nn=2 attempt=1 "]
--- no_error_log
[error]



=== TEST 4: an UNKNOWN call is never released, whatever the list says
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_replay 2xx;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1"]
--- more_headers
X-Call-Id: rp-4
--- error_code eval
[504, 409]
--- response_body_like eval
["", '"type":"urn:ngx-idem:problem:call-outcome-unknown"']
--- no_error_log
[alert]
[emerg]



=== TEST 5: nginx -t refuses a word it does not know
--- config
    location /pay {
        idem_dedupe_replay 2xx 6xx;
    }
--- must_die
--- error_log
invalid value "6xx" in "idem_dedupe_replay" directive, it must be a class (2xx ...), a status code (100 to 599) or grpc=



=== TEST 6: ... and a code out of range
--- config
    location /pay {
        idem_dedupe_replay 99;
    }
--- must_die
--- error_log
invalid value "99" in "idem_dedupe_replay" directive



=== TEST 7: ... and a second one
--- config
    location /pay {
        idem_dedupe_replay 2xx;
        idem_dedupe_replay 4xx;
    }
--- must_die
--- error_log
"idem_dedupe_replay" directive is duplicate
