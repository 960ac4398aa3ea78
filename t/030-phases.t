# Where the module acts: before access checks, across internal redirects,
# in subrequests, and around error_page.

use Test::Nginx::Socket 'no_plan';

repeat_each(2);

no_long_string();
run_tests();

__DATA__

=== TEST 1: a request denied by allow/deny carries the ids
--- config
    location /t {
        idem on;
        deny all;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
--- request
GET /t
--- more_headers
X-Call-Id: denied-1
--- error_code: 403
--- response_headers_like
X-Call-Id: denied-1
X-Trace-Id: [0-9a-f]{32}
--- error_log
access forbidden by rule
--- no_error_log
[alert]



=== TEST 2: a 401 from auth_request carries the ids
--- config
    location /t {
        idem on;
        auth_request /auth;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location = /auth {
        return 401;
    }
--- request
GET /t
--- error_code: 401
--- response_headers_like
X-Call-Id: [0-9a-f-]{36}
X-Trace-Id: [0-9a-f]{32}
--- no_error_log
[error]



=== TEST 3: a bad id is answered before access checks run
--- config
    location /t {
        idem on;
        auth_request /auth;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location = /auth {
        echo_status 401;
        echo "auth ran";
    }
--- request
GET /t
--- more_headers
X-Call-Id: a b
--- error_code: 400
--- response_body_like chomp
invalid-call-id
--- no_error_log
[error]
http subrequest "/auth



=== TEST 4: an auth_request subrequest carries the main request's ids
--- config
    location /t {
        idem on;
        auth_request /auth;
        auth_request_set $auth_saw $upstream_http_x_seen_call_id;
        add_header X-Auth-Saw $auth_saw;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location = /auth {
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/check;
        proxy_pass_request_body off;
    }
    location = /check {
        add_header X-Seen-Call-Id "$http_x_call_id/$http_x_call_id_source";
        echo ok;
    }
    location = /back {
        echo "back saw $http_x_call_id";
    }
--- request
GET /t
--- raw_response_headers_like chomp
\A(?=.*\r\nX-Call-Id: ([0-9a-f-]{36})\r\n)(?=.*\r\nX-Auth-Saw: \1/gateway\r\n)
--- response_body_like chomp
^back saw [0-9a-f-]{36}$
--- no_error_log
[error]



=== TEST 5: error_page to a named location keeps the generated id
--- config
    location /t {
        idem on;
        error_page 418 = @next;
        return 418;
    }
    location @next {
        idem on;
        idem_call_id_missing reject;
        rewrite ^ /back break;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT;
    }
    location = /back {
        add_header X-Seen "$http_x_call_id/$http_x_call_id_source";
        echo ok;
    }
--- request
GET /t
--- raw_response_headers_like chomp
(?i)X-Seen: ([0-9a-f-]{36})/gateway\r\n.*X-Call-Id: \1\r\n
--- response_body
ok
--- no_error_log
[error]



=== TEST 6: error_page to a URI keeps the client's id, sent once
--- config
    location /t {
        idem on;
        error_page 502 /fallback;
        proxy_intercept_errors on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fail;
    }
    location = /fail {
        return 502;
    }
    location = /fallback {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location = /back {
        echo -n $echo_client_request_headers;
    }
--- request
GET /t
--- more_headers
X-Call-Id: keep-me
--- error_code: 502
--- response_headers
X-Call-Id: keep-me
--- response_body_like chomp
\A(?s)(?:(?!(?i)x-call-id:).)*X-Call-Id: keep-me\r\n(?:(?!(?i)x-call-id:).)*\z
--- no_error_log
[error]



=== TEST 7: try_files falling back to a URI keeps the ids
--- config
    location /t {
        idem on;
        try_files /does-not-exist /inner;
    }
    location = /inner {
        idem on;
        idem_call_id_missing reject;
        return 200 "inner $idem_call_id $idem_call_id_source\n";
    }
--- request
GET /t
--- response_body_like chomp
^inner [0-9a-f-]{36} gateway$
--- response_headers_like
X-Call-Id: [0-9a-f-]{36}
--- no_error_log
[error]



=== TEST 8: a rewrite ... last to another idem location keeps the ids
--- config
    location /t {
        idem on;
        rewrite ^ /inner last;
    }
    location = /inner {
        idem on;
        idem_call_id_missing reject;
        return 200 "inner $idem_call_id_source\n";
    }
--- request
GET /t
--- response_body
inner gateway
--- no_error_log
[error]



=== TEST 9: the module's own errors bypass error_page
--- config
    location /t {
        idem on;
        error_page 400 /oops;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location = /oops {
        return 200 "error page";
    }
--- request
GET /t
--- more_headers
X-Call-Id: a b
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
--- response_body_like chomp
^\{"type":"urn:ngx-idem:problem:invalid-call-id"
--- no_error_log
[error]



=== TEST 10: a "return" in the same location carries the ids
--- config
    location /t {
        idem on;
        return 204;
    }
--- request
GET /t
--- more_headers
X-Call-Id: ret-1
--- error_code: 204
--- response_headers
X-Call-Id: ret-1
--- no_error_log
[error]



=== TEST 11: an upstream error page carries the ids
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fail;
    }
    location = /fail {
        return 503;
    }
--- request
GET /t
--- more_headers
X-Call-Id: up-1
--- error_code: 503
--- response_headers
X-Call-Id: up-1
--- no_error_log
[error]



=== TEST 12: the server-level setting applies to its locations
--- config
    idem on;
    location /t {
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location = /back {
        idem off;
        echo "seen $http_x_call_id_source";
    }
--- request
GET /t
--- response_body
seen gateway
--- response_headers_like
X-Call-Id: [0-9a-f-]{36}
--- no_error_log
[error]



=== TEST 13: HTTP/2 clients: the same rules (nginx's grpc_pass is the h2 client)
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            # the protocol of the request the module saw, not the one
            # nginx proxies with (HTTP/1.0 before 1.29.7, HTTP/1.1 after)
            proxy_set_header X-Front $server_protocol;
            proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
        }
    }
--- config
    location /t {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
    location /back {
        echo "seen $http_x_call_id $http_x_call_id_source $http_x_front";
    }
--- request eval
["GET /t", "GET /t", "GET /t"]
--- more_headers eval
["X-Call-Id: h2-1", "", "X-Call-Id: h2 1"]
--- error_code eval
[200, 200, 400]
--- response_headers_like eval
["X-Call-Id: h2-1", "X-Call-Id: [0-9a-f-]{36}", "Content-Type: application/problem\\+json"]
--- response_body_like eval
["^seen h2-1 client HTTP/2.0\$", "^seen [0-9a-f-]{36} gateway HTTP/2.0\$",
 '"detail":"header X-Call-Id: byte 0x20 at offset 2 is not allowed"']
--- no_error_log
[error]
