# The nginx paths a call can take (error_page to a named location or a URI,
# X-Accel-Redirect, try_files, auth_request, mirror, SSI, HTTP/2 clients):
# ids are kept and never read again, and a call the module refused is never
# forwarded, whatever the path.  A failed reload: t/075-metrics-reload.t.

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): TESTs 10 and 15 read the backend's log and the claim of
# fixed call ids, which the first run has already written.

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
--- response_headers
!X-Call-Id
Content-Type: application/problem+json
--- response_body_like chomp
^\{"type":"urn:ngx-idem:problem:invalid-call-id",.*"detail":"header X-Call-Id: byte 0x20 at offset 3 is not allowed","call_id":"[0-9a-f-]{36}"
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



=== TEST 8: X-Accel-Redirect to another upstream: the same ids, each header once
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/accel;
    }
    location = /accel {
        add_header X-Accel-Redirect /inner;
        return 204;
    }
    location = /inner {
        internal;
        idem on;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location = /back {
        echo -n $echo_client_request_headers;
    }
--- request eval
["GET /t", "GET /t"]
--- more_headers eval
["X-Call-Id: accel-1\r\nX-Call-Id-Source: gateway", ""]
--- response_body_like eval
['\AGET /back HTTP/1\.[01]\r\n(?:(?!(?i)x-call-id:)[^\r\n]+\r\n)*X-Call-Id: accel-1\r\n(?:(?!(?i)x-call-id(?:-source)?:)[^\r\n]+\r\n)*X-Call-Id-Source: client\r\n(?:(?!(?i)x-call-(?:id|id-source|attempt):)[^\r\n]+\r\n)*X-Call-Attempt: \d+\r\n(?:(?!(?i)x-call-)[^\r\n]+\r\n)*\r\n\z',
 '\AGET /back HTTP/1\.[01]\r\n(?:(?!(?i)x-call-id:)[^\r\n]+\r\n)*X-Call-Id: [0-9a-f-]{36}\r\n(?:(?!(?i)x-call-id(?:-source)?:)[^\r\n]+\r\n)*X-Call-Id-Source: gateway\r\n(?:(?!(?i)x-call-)[^\r\n]+\r\n)*X-Call-Attempt: \d+\r\n(?:(?!(?i)x-call-)[^\r\n]+\r\n)*\r\n\z']
--- raw_response_headers_like eval
['\A(?s)(?:(?!(?i)x-call-id:).)*X-Call-Id: accel-1\r\n(?:(?!(?i)x-call-id:).)*\z',
 '\A(?s)(?:(?!(?i)x-call-id:).)*X-Call-Id: [0-9a-f-]{36}\r\n(?:(?!(?i)x-call-id:).)*\z']
--- no_error_log
[error]



=== TEST 9: try_files to a named location that proxies: a generated id is kept, sent once
--- config
    location /t {
        idem on;
        try_files /does-not-exist @fallback;
    }
    location @fallback {
        idem on;
        idem_call_id_missing reject;
        rewrite ^ /back break;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
    location = /back {
        echo -n $echo_client_request_headers;
    }
--- request
GET /t
--- raw_response_headers_like chomp
(?s)\A(?:(?!(?i)x-call-id:).)*X-Call-Id: ([0-9a-f-]{36})\r\n(?:(?!(?i)x-call-id:).)*\z
--- response_body_like chomp
\AGET /back HTTP/1\.[01]\r\n(?:(?!(?i)x-call-id:)[^\r\n]+\r\n)*X-Call-Id: [0-9a-f-]{36}\r\n(?:(?!(?i)x-call-id(?:-source)?:)[^\r\n]+\r\n)*X-Call-Id-Source: gateway\r\n(?:(?!(?i)x-call-)[^\r\n]+\r\n)*X-Call-Attempt: 1\r\n
--- no_error_log
[error]



=== TEST 10: mirror: the mirrored request carries the main request's ids
--- config
    location /t {
        idem on;
        mirror /m;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location = /m {
        internal;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["GET /t", "GET /log/mirror-10"]
--- more_headers eval
["X-Call-Id: mirror-10\r\nX-Call-Attempt: 5", ""]
--- response_body_like eval
['\An=[12] attempt=1 ',
 '\An=1 attempt=1 deadline=- tp=00-([0-9a-f]{32})-[0-9a-f]{16}-00 method=GET body=\nn=2 attempt=1 deadline=- tp=00-\1-[0-9a-f]{16}-00 method=GET body=\n\z']
--- no_error_log
[error]



=== TEST 11: mirror: a refused call is not mirrored either
--- config
    location /t {
        idem on;
        mirror /m;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location = /m {
        internal;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["GET /t", "GET /log/mirror_11"]
--- more_headers eval
["X-Call-Id: mirror 11", ""]
--- error_code eval
[400, 200]
--- response_body_like eval
['invalid-call-id', '\A\z']
--- no_error_log
[error]



=== TEST 12: SSI: an included upstream sees the main request's ids
--- config
    location /t {
        idem on;
        ssi on;
        ssi_types text/plain;
        return 200 'a <!--# include virtual="/sub" --> b';
    }
    location = /sub {
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location = /back {
        echo -n "$http_x_call_id/$http_x_call_id_source/$http_x_trace_id";
    }
--- request
GET /t
--- more_headers
X-Call-Id: ssi-12
X-Trace-Id: tr-12
X-Call-Id-Source: gateway
--- response_body chomp
a ssi-12/client/tr-12 b
--- raw_response_headers_like chomp
\A(?s)(?:(?!(?i)x-call-id:).)*X-Call-Id: ssi-12\r\n(?:(?!(?i)x-call-id:).)*\z
--- no_error_log
[error]



=== TEST 13: HTTP/2 clients: a refused call with error_page is answered, not forwarded
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            idem_retry_unsent on;
            error_page 400 = @err;
            proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
        }
        location @err {
            idem on;
            rewrite ^ /back break;
            proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT;
        }
    }
--- config
    location /t {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
    location /back {
        echo "back saw $http_x_call_id";
    }
--- request eval
["POST /t\nbody", "POST /t\nbody"]
--- more_headers eval
["X-Call-Id: h2 13\r\nX-Call-Id-Source: gateway", "X-Call-Id: h2-13"]
--- error_code eval
[400, 200]
--- response_headers_like eval
["Content-Type: application/problem\\+json", "X-Call-Id: h2-13"]
--- response_body_like eval
['"detail":"header X-Call-Id: byte 0x20 at offset 2 is not allowed"',
 '^back saw h2-13$']
--- no_error_log
[error]



=== TEST 14: SSI from a page without idem into an idem location: client copies of the module's headers are dropped there too
--- config
    underscores_in_headers on;
    location /page {
        ssi on;
        ssi_types text/plain;
        return 200 '[<!--# include virtual="/api" -->]';
    }
    location = /api {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location = /back {
        echo -n "source=$http_x_call_id_source attempt=$http_x_call_attempt id=$http_x_call_id";
    }
--- request
GET /page
--- more_headers
X-Call-Id: ssi-14
X-Call-Id-Source: gateway
X_Call_Attempt: 3
--- response_body chomp
[source= attempt= id=ssi-14]
--- no_error_log
[error]



=== TEST 15: a 409 (outcome unknown) bypasses error_page; the duplicate is not forwarded
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_read_timeout 300ms;
        error_page 409 = @err;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location @err {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} del 'idem:c:{paths-409}' >/dev/null");
--- request eval
["POST /d\nbody=1", "POST /d\nbody=1", "GET /log/paths-409"]
--- more_headers eval
["X-Call-Id: paths-409", "X-Call-Id: paths-409", ""]
--- error_code eval
[504, 409, 200]
--- response_body_like eval
['504 Gateway Time-out',
 '\A\{"type":"urn:ngx-idem:problem:call-outcome-unknown",',
 '\An=1 [^\n]*\n\z']
--- no_error_log
[alert]
[crit]
