# The headers the module owns (X-Call-Id-Source, X-Call-Attempt, the
# deadline header, grpc-timeout) and the ids' own headers, spelled with
# underscores: with underscores_in_headers on, nginx keeps "X_Call_Id_Source"
# as a header of its own, while FastCGI, uwsgi and SCGI map it to the same
# variable (HTTP_X_CALL_ID_SOURCE) as the module's header.  Such aliases
# are dropped, never read, never forwarded.

use lib 't/lib';
use FastCGIParams;
use Test::Nginx::Socket 'no_plan';

repeat_each(2);

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: proxy: underscore spellings of the module's headers never reach the upstream
--- config
    underscores_in_headers on;
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
X-Call-Id: u-1
X_Call_Id: forged-id
X_Trace_Id: forged-trace
X_Call_Id_Source: gateway
X_Call_Attempt: 9
X_Deadline_Ms: 1
grpc_timeout: 1m
X_Other_Header: kept
--- response_body_like
\A(?!.*\n(?i:x_call|x_trace|x_deadline|grpc_timeout|x-deadline-ms))GET /back HTTP/1\.[01]\r
(?:[^\r\n]+\r\n)*X-Call-Id: u-1\r
(?:[^\r\n]+\r\n)*X_Other_Header: kept\r
(?:[^\r\n]+\r\n)*X-Call-Id-Source: client\r
X-Call-Attempt: 1\r
--- no_error_log
[error]



=== TEST 2: an underscore deadline is not the budget, nor the upstream's $http_x_deadline_ms
--- config
    underscores_in_headers on;
    location /t {
        idem on;
        idem_deadline 2s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "deadline=$http_x_deadline_ms";
    }
--- request
GET /t
--- more_headers
X_Deadline_Ms: 0
--- response_body_like chomp
^deadline=(?:1[0-9]{3}|2000)$
--- no_error_log
[error]



=== TEST 3: FastCGI: each of the module's variables once, with the module's value
--- config
    underscores_in_headers on;
    location /t {
        idem on;
        idem_deadline 5s;
        fastcgi_pass 127.0.0.1:$TEST_NGINX_FASTCGI_PORT;
    }
--- request
GET /t
--- more_headers
X-Call-Id: u-3
X-Trace-Id: tr-3
X_Call_Id: forged-id
X_Trace_Id: forged-trace
X_Call_Id_Source: gateway
X_Call_Attempt: 9
X_Deadline_Ms: 999999
grpc_timeout: 1m
--- response_body_like chomp
\AHTTP_CONNECTION=close
HTTP_HOST=localhost
HTTP_X_CALL_ATTEMPT=1
HTTP_X_CALL_ID=u-3
HTTP_X_CALL_ID_SOURCE=client
HTTP_X_DEADLINE_MS=(?:4[0-9]{3}|5000)
HTTP_X_TRACE_ID=tr-3
\z
--- no_error_log
[error]



=== TEST 4: FastCGI with a generated id: the forged underscore id does not pass
--- config
    underscores_in_headers on;
    location /t {
        idem on;
        fastcgi_pass 127.0.0.1:$TEST_NGINX_FASTCGI_PORT;
    }
--- request
GET /t
--- more_headers
X_Call_Id: forged-id
X_Call_Id_Source: client
--- response_body_like chomp
\AHTTP_CONNECTION=close
HTTP_HOST=localhost
HTTP_TRACEPARENT=00-[0-9a-f]{32}-[0-9a-f]{16}-00
HTTP_X_CALL_ATTEMPT=1
HTTP_X_CALL_ID=[0-9a-f-]{36}
HTTP_X_CALL_ID_SOURCE=gateway
HTTP_X_TRACE_ID=[0-9a-f]{32}
\z
--- no_error_log
[error]



=== TEST 5: a custom call id header with underscores: its dash spelling is the alias
--- config
    underscores_in_headers on;
    location /t {
        idem on;
        idem_call_id_header X_Request_Id;
        fastcgi_pass 127.0.0.1:$TEST_NGINX_FASTCGI_PORT;
    }
--- request
GET /t
--- more_headers
X_Request_Id: r-5
X-Request-Id: forged
--- response_body_like chomp
\AHTTP_CONNECTION=close
HTTP_HOST=localhost
HTTP_TRACEPARENT=00-[0-9a-f]{32}-[0-9a-f]{16}-00
HTTP_X_CALL_ATTEMPT=1
HTTP_X_CALL_ID_SOURCE=client
HTTP_X_REQUEST_ID=r-5
HTTP_X_TRACE_ID=[0-9a-f]{32}
\z
--- raw_response_headers_like chomp
\r\nX_Request_Id: r-5\r\n
--- no_error_log
[error]
