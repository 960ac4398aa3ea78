# Call ids: validation, generation, and what the upstream and client see.

use Test::Nginx::Socket 'no_plan';

repeat_each(2);

no_long_string();
run_tests();

__DATA__

=== TEST 1: a missing call id is generated (uuid v4) and handed back
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        add_header X-Seen-Call-Id "$http_x_call_id";
        add_header X-Seen-Source "$http_x_call_id_source";
        add_header X-Seen-Attempt "$http_x_call_attempt";
        echo ok;
    }
--- request
GET /t
--- response_headers_like
X-Call-Id: [0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}
X-Seen-Source: gateway
X-Seen-Attempt: 1
--- raw_response_headers_like chomp
(?i)X-Seen-Call-Id: ([0-9a-f-]{36})\r\n.*X-Call-Id: \1\r\n
--- response_body
ok
--- no_error_log
[error]



=== TEST 2: a valid client id is passed upstream and back byte for byte
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        add_header X-Seen-Source "$http_x_call_id_source";
        echo -n $echo_client_request_headers;
    }
--- request
GET /t
--- more_headers
X-Call-Id: Order-42.a_B~c:1
--- response_headers
X-Call-Id: Order-42.a_B~c:1
X-Seen-Source: client
--- response_body_like chomp
\r\nX-Call-Id: Order-42\.a_B~c:1\r\n
--- no_error_log
[error]



=== TEST 3: the call id header is found in any letter case
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        add_header X-Seen-Call-Id "$http_x_call_id";
        add_header X-Seen-Source "$http_x_call_id_source";
        echo ok;
    }
--- request
GET /t
--- more_headers
x-CALL-id: lower-and-UPPER
--- response_headers
X-Call-Id: lower-and-UPPER
X-Seen-Call-Id: lower-and-UPPER
X-Seen-Source: client
--- no_error_log
[error]



=== TEST 4: exactly the maximum length is accepted
--- config
    location /t {
        idem on;
        idem_call_id_max_length 8;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "seen $http_x_call_id";
    }
--- request
GET /t
--- more_headers
X-Call-Id: 12345678
--- response_body
seen 12345678
--- response_headers
X-Call-Id: 12345678
--- no_error_log
[error]



=== TEST 5: one byte over the maximum length is rejected
--- config
    location /t {
        idem on;
        idem_call_id_max_length 8;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached";
    }
--- request
GET /t
--- more_headers
X-Call-Id: 123456789
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
--- response_body_like chomp
^\{"type":"urn:ngx-idem:problem:invalid-call-id","title":"Invalid call id","status":400,"detail":"header X-Call-Id: longer than 8 bytes"
--- error_log
idem: rejected: header X-Call-Id: longer than 8 bytes
--- no_error_log
[error]
GET /back



=== TEST 6: the default maximum is 128
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached";
    }
--- request eval
["GET /t", "GET /t"]
--- more_headers eval
["X-Call-Id: " . ("a" x 128), "X-Call-Id: " . ("a" x 129)]
--- error_code eval
[200, 400]
--- response_body_like eval
["reached", '"detail":"header X-Call-Id: longer than 128 bytes"']
--- no_error_log
[error]



=== TEST 7: a space is rejected, nothing is forwarded, no gateway id in the client's header
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached";
    }
--- request
GET /t
--- more_headers
X-Call-Id: a b
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
Cache-Control: no-store
!X-Call-Id
--- raw_response_headers_like chomp
X-Trace-Id: [0-9a-f]{32}\r\n
--- response_body_like chomp
^\{"type":"urn:ngx-idem:problem:invalid-call-id","title":"Invalid call id","status":400,"detail":"header X-Call-Id: byte 0x20 at offset 1 is not allowed","call_id":"[0-9a-f-]{36}"\}$
--- no_error_log
[error]
GET /back



=== TEST 8: bad bytes: slash, non-ASCII, control bytes, quote, percent
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached";
    }
--- request eval
["GET /t", "GET /t", "GET /t", "GET /t", "GET /t", "GET /t", "GET /t",
 "GET /t", "GET /t"]
--- more_headers eval
["X-Call-Id: a/b", "X-Call-Id: caf\xc3\xa9", "X-Call-Id: a\x01b",
 "X-Call-Id: a\tb", "X-Call-Id: ab\x7f", "X-Call-Id: a\"b\"",
 "X-Call-Id: a%20b", "X-Call-Id: a,b", "X-Call-Id: a+b"]
--- error_code eval
[400, 400, 400, 400, 400, 400, 400, 400, 400]
--- response_body_like eval
["byte 0x2f at offset 1 is not allowed",
 "byte 0xc3 at offset 3 is not allowed",
 "byte 0x01 at offset 1 is not allowed",
 "byte 0x09 at offset 1 is not allowed",
 "byte 0x7f at offset 2 is not allowed",
 "byte 0x22 at offset 1 is not allowed",
 "byte 0x25 at offset 1 is not allowed",
 "byte 0x2c at offset 1 is not allowed",
 "byte 0x2b at offset 1 is not allowed"]
--- no_error_log
[error]
GET /back



=== TEST 9: an empty call id is rejected
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached";
    }
--- raw_request eval
"GET /t HTTP/1.1\r\nHost: localhost\r\nX-Call-Id:\r\nConnection: close\r\n\r\n"
--- error_code: 400
--- response_body_like chomp
"detail":"header X-Call-Id: empty value"
--- no_error_log
[error]
GET /back



=== TEST 10: a call id sent twice is rejected, even in other letter cases
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached";
    }
--- request eval
["GET /t", "GET /t"]
--- more_headers eval
["X-Call-Id: a\r\nX-Call-Id: a", "X-Call-Id: a\r\nx-call-id: b"]
--- error_code eval
[400, 400]
--- response_body_like eval
['"detail":"header X-Call-Id: sent more than once"',
 '"detail":"header X-Call-Id: sent more than once"']
--- no_error_log
[error]
GET /back



=== TEST 11: idem_call_id_missing reject
--- config
    location /t {
        idem on;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached $http_x_call_id";
    }
--- request eval
["GET /t", "GET /t"]
--- more_headers eval
["", "X-Call-Id: mine"]
--- error_code eval
[400, 200]
--- response_body_like eval
['^\{"type":"urn:ngx-idem:problem:missing-call-id","title":"Missing call id","status":400,"detail":"header X-Call-Id: missing"',
 "reached mine"]
--- no_error_log
[error]



=== TEST 12: idem_call_id_pattern
--- config
    location /t {
        idem on;
        idem_call_id_pattern "^ord-[0-9]+$";
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached $http_x_call_id";
    }
--- request eval
["GET /t", "GET /t", "GET /t"]
--- more_headers eval
["X-Call-Id: ord-12", "X-Call-Id: ord-x", "X-Call-Id: ord 12"]
--- error_code eval
[200, 400, 400]
--- response_body_like eval
["reached ord-12",
 '"detail":"header X-Call-Id: does not match idem_call_id_pattern"',
 '"detail":"header X-Call-Id: byte 0x20 at offset 3 is not allowed"']
--- no_error_log
[error]



=== TEST 13: the pattern does not apply to generated ids
--- config
    location /t {
        idem on;
        idem_call_id_pattern "^ord-[0-9]+$";
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached $http_x_call_id_source";
    }
--- request
GET /t
--- response_body
reached gateway
--- no_error_log
[error]



=== TEST 14: the prefixed generator
--- http_config
    idem_node_id node-7;
--- config
    location /t {
        idem on;
        idem_call_id_generator prefixed;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /u {
        idem on;
        idem_call_id_generator prefixed;
        idem_call_id_prefix pay;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "seen $http_x_call_id";
    }
--- request eval
["GET /t", "GET /u"]
--- response_headers_like eval
["X-Call-Id: gw-1[0-9]{12}-[0-9a-f]{8}-node-7",
 "X-Call-Id: pay-1[0-9]{12}-[0-9a-f]{8}-node-7"]
--- response_body_like eval
["^seen gw-1[0-9]{12}-[0-9a-f]{8}-node-7\$",
 "^seen pay-1[0-9]{12}-[0-9a-f]{8}-node-7\$"]
--- no_error_log
[error]



=== TEST 15: the node id defaults to the host name
--- config
    location /t {
        idem on;
        idem_call_id_generator prefixed;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "seen $http_x_call_id $hostname";
    }
--- request
GET /t
--- response_body_like chomp
^seen gw-[0-9]{13}-[0-9a-f]{8}-([A-Za-z0-9._~:-]+) \1\n$
--- no_error_log
[error]



=== TEST 16: a custom call id header
--- config
    location /t {
        idem on;
        idem_call_id_header X-Request-Id;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "seen $http_x_request_id [$http_x_call_id]";
    }
--- request eval
["GET /t", "GET /t"]
--- more_headers eval
["X-Request-Id: r-1\r\nX-Call-Id: ignored", "X-Request-Id: r 1"]
--- error_code eval
[200, 400]
--- response_headers eval
["X-Request-Id: r-1", "!X-Request-Id"]
--- response_body_like eval
["seen r-1 \\[ignored\\]",
 '"detail":"header X-Request-Id: byte 0x20.*"call_id":"[0-9a-f-]{36}"']
--- no_error_log
[error]



=== TEST 17: client copies of X-Call-Id-Source and X-Call-Attempt are removed
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
X-Call-Id-Source: gateway
X-Call-Id: forged
x-call-attempt: 7
X-Other: kept
--- response_body_like chomp
\A(?s)(?=.*X-Other: kept\r\n)(?:(?!(?i)x-call-id-source).)*X-Call-Id-Source: client\r\n(?:(?!(?i)x-call-id-source).)*\z
--- no_error_log
[error]



=== TEST 18: exactly one X-Call-Attempt, with 1, reaches the upstream
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
X-Call-Attempt: 7
--- response_body_like chomp
\A(?s)(?:(?!(?i)x-call-attempt).)*X-Call-Attempt: 1\r\n(?:(?!(?i)x-call-attempt).)*\z
--- no_error_log
[error]



=== TEST 19: the upstream's own X-Call-Id in the answer is replaced
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        add_header X-Call-Id "upstream-made";
        add_header X-Trace-Id "upstream-trace";
        echo ok;
    }
--- request
GET /t
--- more_headers
X-Call-Id: c-1
X-Trace-Id: t-1
--- raw_response_headers_like chomp
\A(?s)(?:(?!(?i)x-call-id:).)*X-Call-Id: c-1\r\n(?:(?!(?i)x-call-id:).)*\z
--- response_headers
X-Call-Id: c-1
X-Trace-Id: t-1
--- no_error_log
[error]



=== TEST 20: HEAD with a bad id: 400 without a body
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
--- request
HEAD /t
--- more_headers
X-Call-Id: a b
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
--- response_body
--- no_error_log
[error]



=== TEST 21: POST with a body and a bad id: 400, the body is discarded
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached";
    }
--- request
POST /t
{"amount": 100}
--- more_headers
X-Call-Id: ../../etc
--- error_code: 400
--- response_body_like chomp
"detail":"header X-Call-Id: byte 0x2f at offset 2 is not allowed"
--- no_error_log
[error]
GET /back



=== TEST 22: variables
--- config
    location /t {
        idem on;
        return 200 "$idem_call_id $idem_call_id_source $idem_trace_id\n";
    }
--- request eval
["GET /t", "GET /t"]
--- more_headers eval
["X-Call-Id: v-1\r\nX-Trace-Id: tr-1", ""]
--- response_body_like eval
["^v-1 client tr-1\n\$",
 "^[0-9a-f-]{36} gateway [0-9a-f]{32}\n\$"]
--- no_error_log
[error]



=== TEST 23: add_header X-Call-Id in an idem location: the module's id, once
--- config
    location /t {
        idem on;
        add_header X-Call-Id "forged";
        add_header X-Trace-Id "forged-trace";
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo ok;
    }
--- request
GET /t
--- more_headers
X-Call-Id: c-23
X-Trace-Id: t-23
--- raw_response_headers_like chomp
\A(?s)(?:(?!(?i)x-call-id:).)*X-Call-Id: c-23\r\n(?:(?!(?i)x-call-id:).)*\z
--- response_headers
X-Call-Id: c-23
X-Trace-Id: t-23
--- no_error_log
[error]



=== TEST 24: add_header ... always, on the module's own 400 (no call id: the client's was refused) and on an upstream's 502
--- config
    location /t {
        idem on;
        add_header X-Call-Id "forged" always;
        add_header x-call-id "forged-lower" always;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        return 502;
    }
--- request eval
["GET /t", "GET /t"]
--- more_headers eval
["X-Call-Id: c-24", "X-Call-Id: bad id"]
--- error_code eval
[502, 400]
--- raw_response_headers_like eval
['\A(?s)(?:(?!(?i)x-call-id:).)*X-Call-Id: c-24\r\n(?:(?!(?i)x-call-id:).)*\z',
 '\A(?s)(?:(?!(?i)x-call-id:).)*\z']
--- no_error_log
[error]



=== TEST 25: add_header with return, and a generated id
--- config
    location /t {
        idem on;
        add_header X-Call-Id "forged";
        add_header X-Trace-Id "forged-trace";
        return 200 "id=$idem_call_id\n";
    }
--- request
GET /t
--- raw_response_headers_like chomp
\A(?s)(?:(?!(?i)x-call-id:).)*X-Call-Id: ([0-9a-f-]{36})\r\n(?:(?!(?i)x-call-id:).)*\z
--- response_headers_like
X-Call-Id: [0-9a-f-]{36}
X-Trace-Id: [0-9a-f]{32}
--- response_body_like chomp
^id=[0-9a-f-]{36}$
--- no_error_log
[error]



=== TEST 26: a refused call gets no generated id back: a missing id (reject), a bad trace id, a spent budget; a client's own id is echoed
--- config
    location /r {
        idem on;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached";
    }
--- request eval
["GET /r", "GET /t", "GET /t", "GET /t"]
--- more_headers eval
["", "X-Trace-Id: a b", "X-Deadline-Ms: 0",
 "X-Deadline-Ms: 0\r\nX-Call-Id: mine-26"]
--- error_code eval
[400, 400, 504, 504]
--- response_headers eval
["!X-Call-Id", "!X-Call-Id", "!X-Call-Id", "X-Call-Id: mine-26"]
--- response_body_like eval
["missing-call-id", "invalid-trace-id", "deadline-exceeded",
 '"call_id":"mine-26"']
--- no_error_log
[error]



=== TEST 26b: a call that went on keeps its generated id (the refusals of TEST 26 beside it)
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached";
    }
--- request
GET /t
--- error_code: 200
--- response_headers_like
X-Call-Id: [0-9a-f-]{36}
--- response_body
reached
--- no_error_log
[error]



=== TEST 27: the call_id of an invalid id's 400 is the id the gateway logged for the refused request ($idem_call_id in its access log line, source gateway), which no header hands out
--- http_config
    log_format refused 'REFUSED $idem_call_id $idem_call_id_source $status';
--- config
    location /t {
        idem on;
        access_log logs/error.log refused;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "reached";
    }
--- request
GET /t
--- more_headers
X-Call-Id: a b
--- error_code: 400
--- response_headers
!X-Call-Id
--- response_body_like eval
qr/"call_id":"([0-9a-f-]{36})"\}$(?{ $main::refused_id = $^N })/
--- error_log eval
qr/REFUSED (??{ quotemeta($main::refused_id \/\/ 'none') }) gateway 400\b/
--- no_error_log
[error]
GET /back
