# A loaded module costs nothing where "idem on" is not set.

use Test::Nginx::Socket 'no_plan';

repeat_each(2);

no_long_string();
run_tests();

__DATA__

=== TEST 1: loaded, never enabled: no hook runs, nothing is added
--- config
    location /t {
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo -n $echo_client_request_headers;
    }
--- request
GET /t
--- more_headers
X-Call-Id-Source: gateway
traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
--- response_headers
!X-Call-Id
!X-Trace-Id
--- response_body_like chomp
(?s)X-Call-Id-Source: gateway\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n
--- no_error_log
idem handler
idem header filter
[error]



=== TEST 2: enabled elsewhere: a route without it is left alone
--- config
    location /on {
        idem on;
        return 200;
    }
    location /t {
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo -n $echo_client_request_headers;
    }
--- request
GET /t
--- more_headers
X-Call-Id: a b
X-Call-Id-Source: gateway
--- response_headers
!X-Call-Id
!X-Trace-Id
--- response_body_like chomp
(?s)X-Call-Id: a b\r\nX-Call-Id-Source: gateway\r\n
--- no_error_log
idem handler
idem header filter
[error]



=== TEST 3: "idem off" below an "idem on"
--- config
    idem on;
    location /t {
        idem off;
        return 200 "[$idem_call_id]\n";
    }
--- request
GET /t
--- response_body
[]
--- response_headers
!X-Call-Id
--- no_error_log
idem handler
[error]
