# The nginx paths a call can take (error_page to a named location or a URI,
# X-Accel-Redirect, try_files, auth_request, mirror, SSI, HTTP/2 clients):
# ids are kept and never read again, and a call the module refused is never
# forwarded, whatever the path.  A failed reload: t/075-metrics-reload.t.

use Test::Nginx::Socket 'no_plan';

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: a refused call whose body cannot be discarded is not handed to error_page
--- config
    location /t {
        idem on;
        idem_retry_unsent on;
        error_page 400 = @err;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location @err {
        rewrite ^ /back break;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
    location = /back {
        echo "back saw $http_x_call_id/$http_x_call_id_source/$http_x_call_attempt";
    }
--- raw_request eval
"POST /t HTTP/1.1\r
Host: localhost\r
X-Call-Id: bad id\r
X-Call-Id-Source: gateway\r
X-Call-Attempt: 7\r
Transfer-Encoding: chunked\r
Connection: close\r
\r
zz\r
\r
"
--- error_code: 400
--- response_headers_like
X-Call-Id: [0-9a-f-]{36}
Content-Type: application/problem\+json
--- response_body_like chomp
^\{"type":"urn:ngx-idem:problem:invalid-call-id",.*"detail":"header X-Call-Id: byte 0x20 at offset 3 is not allowed"
--- error_log
client sent invalid chunked body
idem: request body not discarded
--- no_error_log
http init upstream
[alert]
[crit]



=== TEST 2: ... nor retried into a crash when @err may try a second server
--- http_config
    upstream two {
        server 127.0.0.1:1;
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
--- config
    idem_retry_unsent on;
    location /t {
        idem on;
        error_page 400 = @err;
        proxy_pass http://two/back;
    }
    location @err {
        idem on;
        rewrite ^ /back break;
        proxy_pass http://two;
    }
    location = /back {
        echo "back saw $http_x_call_id/$http_x_call_id_source/$http_x_call_attempt";
    }
--- raw_request eval
"POST /t HTTP/1.1\r
Host: localhost\r
X-Call-Id: bad id\r
X-Call-Id-Source: gateway\r
X-Call-Attempt: 7\r
Transfer-Encoding: chunked\r
Connection: close\r
\r
zz\r
\r
"
--- error_code: 400
--- response_body_like chomp
^\{"type":"urn:ngx-idem:problem:invalid-call-id",
--- error_log
client sent invalid chunked body
--- no_error_log
http init upstream
[alert]
[crit]



=== TEST 3: a spent budget with a broken body: the 504 problem, not error_page
--- config
    location /t {
        idem on;
        error_page 400 504 = @err;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location @err {
        idem on;
        rewrite ^ /back break;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
    location = /back {
        echo "back saw $http_x_call_id";
    }
--- raw_request eval
"POST /t HTTP/1.1\r
Host: localhost\r
X-Call-Id: spent-1\r
X-Deadline-Ms: 0\r
Transfer-Encoding: chunked\r
Connection: close\r
\r
zz\r
\r
"
--- error_code: 504
--- response_headers
X-Call-Id: spent-1
--- response_body_like chomp
^\{"type":"urn:ngx-idem:problem:deadline-exceeded",.*"call_id":"spent-1"\}$
--- error_log
client sent invalid chunked body
--- no_error_log
http init upstream
[alert]
[crit]



=== TEST 4: a missing id (reject) with a broken body, error_page to a URI
--- config
    location /t {
        idem on;
        idem_call_id_missing reject;
        error_page 400 /err;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location = /err {
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location = /back {
        echo "back saw $http_x_call_id";
    }
--- raw_request eval
"POST /t HTTP/1.1\r
Host: localhost\r
X-Call-Id-Source: client\r
Transfer-Encoding: chunked\r
Connection: close\r
\r
zz\r
\r
"
--- error_code: 400
--- response_body_like chomp
^\{"type":"urn:ngx-idem:problem:missing-call-id",
--- error_log
client sent invalid chunked body
--- no_error_log
http init upstream
[alert]
[crit]



=== TEST 5: a dedupe call whose body is broken: nginx's 400, error_page, nothing forwarded
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    idem on;
    idem_dedupe on;
    idem_dedupe_scope off;
    location /d {
        error_page 400 = @err;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location @err {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- raw_request eval
"POST /d HTTP/1.1\r
Host: localhost\r
X-Call-Id: broken-body-1\r
Transfer-Encoding: chunked\r
Connection: close\r
\r
zz\r
\r
"
--- error_code: 400
--- error_log
client sent invalid chunked body
--- no_error_log
http init upstream
[alert]
[crit]



=== TEST 6: a 422 (same id, another body) bypasses error_page; the second call is not forwarded
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        error_page 409 422 503 = @err;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location @err {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} del 'idem:c:{paths-422}' >/dev/null");
--- request eval
["POST /d\nbody=1", "POST /d\nbody=2", "GET /log/paths-422"]
--- more_headers eval
["X-Call-Id: paths-422", "X-Call-Id: paths-422", ""]
--- error_code eval
[200, 422, 200]
--- response_body_like eval
['\An=1 attempt=1 ',
 '\A\{"type":"urn:ngx-idem:problem:payload-mismatch",',
 '\An=1 attempt=1 [^\n]* body=body=1\n\z']
--- no_error_log
[error]



=== TEST 7: a 503 (Redis cannot be reached) bypasses error_page; nothing forwarded
--- http_config
    idem_redis 127.0.0.1:1 connect_timeout=100ms timeout=200ms;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        error_page 503 = @err;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location @err {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request
POST /d
body=1
--- more_headers
X-Call-Id: paths-503
--- error_code: 503
--- response_body_like chomp
^\{"type":"urn:ngx-idem:problem:dedupe-unavailable",
--- no_error_log
http init upstream
[alert]
[crit]
