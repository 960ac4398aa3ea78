# The trace id (parent, whole chain) and the call id (child, this call).

use Test::Nginx::Socket 'no_plan';

repeat_each(2);

no_long_string();
run_tests();

__DATA__

=== TEST 1: a client trace id is kept, and a 32-hex one becomes a traceparent, not sampled
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "trace=$http_x_trace_id tp=$http_traceparent";
    }
--- request
GET /t
--- more_headers
X-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736
--- response_headers
X-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736
--- response_body_like chomp
^trace=4bf92f3577b34da6a3ce929d0e0e4736 tp=00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-00$
--- no_error_log
[error]



=== TEST 2: a trace id that is not 32 hex is kept, with no traceparent
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "trace=$http_x_trace_id tp=[$http_traceparent]";
    }
--- request eval
["GET /t", "GET /t"]
--- more_headers eval
["X-Trace-Id: chain-Abc.1", "X-Trace-Id: 4BF92F3577B34DA6A3CE929D0E0E4736"]
--- response_body eval
["trace=chain-Abc.1 tp=[]\n",
 "trace=4BF92F3577B34DA6A3CE929D0E0E4736 tp=[]\n"]
--- no_error_log
[error]



=== TEST 3: no trace id: 32 lowercase hex are generated, sent upstream and back, not sampled
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        add_header X-Seen-Trace "$http_x_trace_id";
        echo "tp=$http_traceparent";
    }
--- request
GET /t
--- raw_response_headers_like chomp
(?i)X-Seen-Trace: ([0-9a-f]{32})\r\n.*X-Trace-Id: \1\r\n
--- response_body_like chomp
^tp=00-[0-9a-f]{32}-[0-9a-f]{16}-00$
--- no_error_log
[error]



=== TEST 4: the trace id is taken from a valid traceparent; its parent and flags pass on
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "trace=$http_x_trace_id tp=$http_traceparent";
    }
--- request
GET /t
--- more_headers
traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00
--- response_headers
X-Trace-Id: 0af7651916cd43dd8448eb211c80319c
--- response_body_like chomp
^trace=0af7651916cd43dd8448eb211c80319c tp=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00$
--- no_error_log
[error]



=== TEST 5: the client's traceparent reaches the upstream once, as the module writes it
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo -n $echo_client_request_headers;
    }
--- request
GET /t
--- more_headers
Traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
--- response_body_like chomp
\A(?s)(?:(?!(?i)traceparent).)*traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n(?:(?!(?i)traceparent).)*\z
--- no_error_log
[error]



=== TEST 6: X-Trace-Id wins over a traceparent of another trace: its parent and flags are not taken
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "trace=$http_x_trace_id tp=$http_traceparent";
    }
--- request
GET /t
--- more_headers
X-Trace-Id: 11111111111111111111111111111111
traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
--- response_body_like chomp
^trace=11111111111111111111111111111111 tp=00-11111111111111111111111111111111-(?!b7ad6b7169203331)[0-9a-f]{16}-00$
--- no_error_log
[error]



=== TEST 7: invalid traceparents are ignored and a trace id is generated
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "trace=$http_x_trace_id tp=$http_traceparent";
    }
--- request eval
[("GET /t") x 10]
--- more_headers eval
["traceparent: 00-00000000000000000000000000000000-b7ad6b7169203331-01",
 "traceparent: 00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
 "traceparent: 00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
 "traceparent: ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
 "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
 "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
 "traceparent: 00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01",
 "traceparent: garbage",
 "traceparent: 00-0af7651916cd43dd8448eb211c8031zz-b7ad6b7169203331-01",
 "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]
--- response_body_like eval
[("^trace=(?!0af7651916cd43dd8448eb211c80319c)(?!0{32})([0-9a-f]{32}) tp=00-\\1-(?!b7ad6b7169203331)[0-9a-f]{16}-00\$") x 10]
--- no_error_log
[error]



=== TEST 8: a later traceparent version with extra fields is accepted, sent on as version 00
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "trace=$http_x_trace_id tp=$http_traceparent";
    }
--- request
GET /t
--- more_headers
traceparent: 01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future
--- response_body
trace=0af7651916cd43dd8448eb211c80319c tp=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
--- no_error_log
[error]



=== TEST 9: a bad trace id is rejected; the problem names the call id
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached";
    }
--- request eval
[("GET /t") x 4]
--- more_headers eval
["X-Call-Id: c-9\r\nX-Trace-Id: a b",
 "X-Call-Id: c-9\r\nX-Trace-Id: t\r\nX-Trace-Id: t",
 "X-Call-Id: c-9\r\nX-Trace-Id: " . ("f" x 129),
 "X-Call-Id: c-9\r\nX-Trace-Id: t/1"]
--- error_code eval
[400, 400, 400, 400]
--- response_headers_like eval
[("X-Call-Id: c-9") x 4]
--- response_body_like eval
['^\{"type":"urn:ngx-idem:problem:invalid-trace-id","title":"Invalid trace id","status":400,"detail":"header X-Trace-Id: byte 0x20 at offset 1 is not allowed","call_id":"c-9"\}$',
 '"detail":"header X-Trace-Id: sent more than once","call_id":"c-9"',
 '"detail":"header X-Trace-Id: longer than 128 bytes","call_id":"c-9"',
 '"detail":"header X-Trace-Id: byte 0x2f at offset 1 is not allowed"']
--- no_error_log
[error]
GET /back



=== TEST 10: an empty trace id is rejected
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
--- raw_request eval
"GET /t HTTP/1.1\r\nHost: localhost\r\nX-Trace-Id:\r\nConnection: close\r\n\r\n"
--- error_code: 400
--- response_body_like chomp
"detail":"header X-Trace-Id: empty value"
--- no_error_log
[error]



=== TEST 11: a custom trace id header
--- config
    location /t {
        idem on;
        idem_trace_id_header X-B3-TraceId;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "b3=$http_x_b3_traceid x=[$http_x_trace_id]";
    }
--- request
GET /t
--- more_headers
X-B3-TraceId: 80f198ee56343ba864fe8b2a57d3eff7
--- response_headers
X-B3-TraceId: 80f198ee56343ba864fe8b2a57d3eff7
--- response_body
b3=80f198ee56343ba864fe8b2a57d3eff7 x=[]
--- no_error_log
[error]



=== TEST 12: trace id and call id are sent as a pair, over HTTP/1.0 too
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "call=$http_x_call_id trace=$http_x_trace_id";
    }
--- request
GET /t HTTP/1.0
--- more_headers
X-Call-Id: pair-1
X-Trace-Id: chain-1
--- response_body
call=pair-1 trace=chain-1
--- response_headers
X-Call-Id: pair-1
X-Trace-Id: chain-1
--- no_error_log
[error]



=== TEST 13: add_header X-Trace-Id (also always): the request's trace id, once
--- config
    location /t {
        idem on;
        add_header X-Trace-Id "forged-trace" always;
        return 200 "trace=$idem_trace_id\n";
    }
--- request
GET /t
--- more_headers
X-Trace-Id: tr-13
--- raw_response_headers_like chomp
\A(?s)(?:(?!(?i)x-trace-id:).)*X-Trace-Id: tr-13\r\n(?:(?!(?i)x-trace-id:).)*\z
--- response_body
trace=tr-13
--- no_error_log
[error]



=== TEST 14: a custom trace id header set by add_header is replaced too
--- config
    location /t {
        idem on;
        idem_trace_id_header X-Request-Trace;
        add_header X-Request-Trace "forged";
        return 200 "trace=$idem_trace_id\n";
    }
--- request
GET /t
--- more_headers
X-Request-Trace: tr-14
--- raw_response_headers_like chomp
\A(?s)(?:(?!(?i)x-request-trace:).)*X-Request-Trace: tr-14\r\n(?:(?!(?i)x-request-trace:).)*\z
--- no_error_log
[error]



=== TEST 15: an X-Trace-Id of 32 zeros is kept byte for byte, as a trace id of the client's own form: no traceparent, for W3C calls the zero id invalid
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "trace=$http_x_trace_id tp=[$http_traceparent]";
    }
--- request
GET /t
--- more_headers
X-Trace-Id: 00000000000000000000000000000000
--- response_headers
X-Trace-Id: 00000000000000000000000000000000
--- response_body
trace=00000000000000000000000000000000 tp=[]
--- no_error_log
[error]
