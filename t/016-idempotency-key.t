# The call id as an RFC 8941 String (the IETF Idempotency-Key draft):
# "abc" and abc are one call id; the header itself is never rewritten.

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): TEST 11 claims a fixed Idempotency-Key, and --- init
# flushes Redis once per block, not before the second run (a replay then).

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: a quoted Idempotency-Key is accepted; upstream gets it as sent, the answer echoes it
--- config
    location /t {
        idem on;
        idem_call_id_header Idempotency-Key;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
        add_header X-Var "[$idem_call_id] $idem_call_id_source";
    }
    location /back {
        echo -n $echo_client_request_headers;
    }
--- request
GET /t
--- more_headers
Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
--- response_headers
Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
X-Var: [8e03978e-40d5-43e8-bc93-6894a57f9324] client
--- response_body_like chomp
\r\nIdempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"\r\n.*X-Call-Id-Source: client\r\n
--- no_error_log
[error]



=== TEST 2: a bare token (Stripe-style) still works on the same route
--- config
    location /t {
        idem on;
        idem_call_id_header Idempotency-Key;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
        add_header X-Var "[$idem_call_id]";
    }
    location /back {
        echo -n $echo_client_request_headers;
    }
--- request
GET /t
--- more_headers
Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324
--- response_headers
Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324
X-Var: [8e03978e-40d5-43e8-bc93-6894a57f9324]
--- response_body_like chomp
\r\nIdempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324\r\n
--- no_error_log
[error]



=== TEST 3: Structured Field parameters after the string are allowed and ignored; the header passes unchanged
--- config
    location /t {
        idem on;
        idem_call_id_header Idempotency-Key;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
        add_header X-Var "[$idem_call_id]";
    }
    location /back {
        echo -n $echo_client_request_headers;
    }
--- request eval
["GET /t", "GET /t", "GET /t", "GET /t"]
--- more_headers eval
['Idempotency-Key: "k-1";a=1;b', 'Idempotency-Key: "k-2"; v="x\\"y"; f=?1',
 'Idempotency-Key: "k-3";t=tok/en:1;n=-1.5;bs=:aGk=:',
 'Idempotency-Key: "k-4"  ']
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
['X-Var: [k-1]' . "\n" . 'Idempotency-Key: "k-1";a=1;b',
 'X-Var: [k-2]' . "\n" . 'Idempotency-Key: "k-2"; v="x\\"y"; f=?1',
 'X-Var: [k-3]', 'X-Var: [k-4]']
--- response_body_like eval
['\r\nIdempotency-Key: "k-1";a=1;b\r\n',
 '\r\nIdempotency-Key: "k-2"; v="x\\\\"y"; f=\?1\r\n',
 '\r\nIdempotency-Key: "k-3";t=tok/en:1;n=-1\.5;bs=:aGk=:\r\n',
 '\r\nIdempotency-Key: "k-4"\r\n']
--- no_error_log
[error]



=== TEST 4: malformed strings get the invalid-call-id problem, say what is wrong, and reach nothing
--- config
    location /t {
        idem on;
        idem_call_id_header Idempotency-Key;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo reached;
    }
--- request eval
["GET /t", "GET /t", "GET /t", "GET /t", "GET /t", "GET /t", "GET /t",
 "GET /t", "GET /t", "GET /t"]
--- more_headers eval
['Idempotency-Key: "abc', 'Idempotency-Key: "a\\bc"', "Idempotency-Key: \"a\tb\"",
 "Idempotency-Key: \"caf\xc3\xa9\"", 'Idempotency-Key: "abc"x',
 'Idempotency-Key: "abc";A=1', 'Idempotency-Key: "abc";a=', 'Idempotency-Key: ""',
 'Idempotency-Key: "a\\"b"', 'Idempotency-Key: "a b"']
--- error_code eval
[400, 400, 400, 400, 400, 400, 400, 400, 400, 400]
--- response_body_like eval
['"type":"urn:ngx-idem:problem:invalid-call-id".*"detail":"header Idempotency-Key: unterminated string"',
 '"detail":"header Idempotency-Key: bad escape at offset 2"',
 '"detail":"header Idempotency-Key: byte 0x09 at offset 2 is not allowed in a string"',
 '"detail":"header Idempotency-Key: byte 0xc3 at offset 4 is not allowed in a string"',
 '"detail":"header Idempotency-Key: unexpected data after the string"',
 '"detail":"header Idempotency-Key: malformed parameter after the string"',
 '"detail":"header Idempotency-Key: malformed parameter after the string"',
 '"detail":"header Idempotency-Key: empty value"',
 '"detail":"header Idempotency-Key: byte 0x22 at offset 1 is not allowed"',
 '"detail":"header Idempotency-Key: byte 0x20 at offset 1 is not allowed"']
--- response_headers eval
["!Idempotency-Key", "!Idempotency-Key", "!Idempotency-Key", "!Idempotency-Key",
 "!Idempotency-Key", "!Idempotency-Key", "!Idempotency-Key", "!Idempotency-Key",
 "!Idempotency-Key", "!Idempotency-Key"]
--- no_error_log
[error]
GET /back



=== TEST 5: the string's content obeys the length and pattern rules of a bare id
--- config
    location /t {
        idem on;
        idem_call_id_header Idempotency-Key;
        idem_call_id_max_length 8;
        idem_call_id_missing reject;
        idem_call_id_pattern "^pay-";
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "seen $http_idempotency_key";
    }
--- request eval
["GET /t", "GET /t", "GET /t"]
--- more_headers eval
['Idempotency-Key: "pay-1234"', 'Idempotency-Key: "pay-12345"',
 'Idempotency-Key: "ord-1234"']
--- error_code eval
[200, 400, 400]
--- response_body_like eval
['^seen "pay-1234"$', '"detail":"header Idempotency-Key: longer than 8 bytes"',
 '"detail":"header Idempotency-Key: does not match idem_call_id_pattern"']
--- no_error_log
[error]



=== TEST 6: an invalid client id gets no gateway id in its header name; the body names the id the gateway logged
--- config
    location /t {
        idem on;
        idem_call_id_header Idempotency-Key;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo reached;
    }
--- request
GET /t
--- more_headers
Idempotency-Key: "unterminated
--- error_code: 400
--- response_headers
!Idempotency-Key
Content-Type: application/problem+json
--- response_body_like chomp
"call_id":"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"\}$
--- error_log
idem: rejected: header Idempotency-Key: unterminated string
--- no_error_log
[error]
GET /back



=== TEST 7: idem_call_id_form string: generated ids go upstream and back quoted
--- config
    location /t {
        idem on;
        idem_call_id_header Idempotency-Key;
        idem_call_id_form string;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
        add_header X-Var "[$idem_call_id] $idem_call_id_source";
    }
    location /back {
        add_header X-Seen "$http_idempotency_key";
        echo -n $echo_client_request_headers;
    }
--- request
GET /t
--- response_headers_like
Idempotency-Key: "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
X-Var: \[[0-9a-f-]{36}\] gateway
X-Seen: "[0-9a-f-]{36}"
--- raw_response_headers_like chomp
(?i)X-Seen: ("[0-9a-f-]{36}")\r\n.*Idempotency-Key: \1\r\n
--- no_error_log
[error]



=== TEST 8: idem_call_id_form string leaves a client's bare id as it is; prefixed ids are quoted too
--- config
    location /t {
        idem on;
        idem_call_id_form string;
        idem_call_id_generator prefixed;
        idem_call_id_prefix ord;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "seen $http_x_call_id";
    }
--- request eval
["GET /t", "GET /t"]
--- more_headers eval
["X-Call-Id: bare-1", ""]
--- response_headers_like eval
["X-Call-Id: bare-1", 'X-Call-Id: "ord-\d{13}-[0-9a-f]{8}-[^"]+"']
--- response_body_like eval
['^seen bare-1$', '^seen "ord-\d{13}-[0-9a-f]{8}-[^"]+"$']
--- no_error_log
[error]



=== TEST 9: an upstream's own copy of the header is replaced by the client's form
--- config
    location /t {
        idem on;
        idem_call_id_header Idempotency-Key;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        add_header Idempotency-Key forged;
        echo ok;
    }
--- request
GET /t
--- more_headers
Idempotency-Key: "k-9"
--- raw_response_headers_like chomp
\A(?:(?!Idempotency-Key).)*Idempotency-Key: "k-9"\r\n(?:(?!Idempotency-Key).)*\z
--- no_error_log
[error]



=== TEST 10: idem_call_id_form takes token or string only
--- config
    location /t {
        idem on;
        idem_call_id_form quoted;
        return 200;
    }
--- must_die
--- error_log
invalid value "quoted" in "idem_call_id_form" directive, it must be "token" or "string"



=== TEST 11: dedupe: "k" and k are one call; a replay echoes the duplicate's own form; another body is a 422
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_call_id_header Idempotency-Key;
        idem_call_id_missing reject;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem on;
        idem_dedupe_scope off;
        idem_status;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /d\norder=1", "POST /d\norder=1", "POST /d\norder=1", "POST /d\norder=2",
 "GET /calls/ik-11", "GET /calls/%22ik-11%22"]
--- more_headers eval
['Idempotency-Key: "ik-11"', 'Idempotency-Key: ik-11',
 'Idempotency-Key: "ik-11";x=1', 'Idempotency-Key: ik-11', '', '']
--- error_code eval
[200, 200, 200, 422, 200, 200]
--- response_headers eval
['!Idempotent-Replayed' . "\n" . 'Idempotency-Key: "ik-11"',
 'Idempotent-Replayed: true' . "\n" . 'Idempotency-Key: ik-11',
 'Idempotent-Replayed: true' . "\n" . 'Idempotency-Key: "ik-11";x=1',
 'Idempotency-Key: ik-11', '', '']
--- response_body_like eval
['\An=1 attempt=1 ', '\An=1 attempt=1 ', '\An=1 attempt=1 ',
 '"type":"urn:ngx-idem:problem:payload-mismatch"',
 '\A\{"call_id":"ik-11",.*"state":"SUCCESS",.*"executions":1,',
 '\A\{"call_id":"ik-11",.*"state":"SUCCESS",.*"executions":1,']
--- no_error_log
[error]



=== TEST 12: a missing key on a reject route: 400 without a generated Idempotency-Key (a client could send it as its own); the client's own key is echoed
--- config
    location /t {
        idem on;
        idem_call_id_header Idempotency-Key;
        idem_call_id_missing reject;
        idem_call_id_form string;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo reached;
    }
--- request eval
["GET /t", "GET /t"]
--- more_headers eval
["", 'Idempotency-Key: "pay-12"']
--- error_code eval
[400, 200]
--- response_headers eval
["!Idempotency-Key\nContent-Type: application/problem+json",
 'Idempotency-Key: "pay-12"']
--- response_body_like eval
["missing-call-id", "reached"]
--- no_error_log
[error]
