# Duplicate suppression (idem_dedupe): one row of the README's table per
# block, each checked against what reached the backend (util/backend.pl
# logs every request per call id; /log/<id> shows the log).
# Concurrency and two gateways on one Redis: t/110-dedupe-concurrency.t.

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): dedupe of fixed call ids: the second run's first call is
# a replay of the first run's (--- init flushes Redis once per block).

no_long_string();
no_shuffle();
check_accum_error_log();
run_tests();

__DATA__

=== TEST 1: a new id is forwarded; its duplicate gets the same answer, replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /d\norder=1", "POST /d\norder=1", "GET /log/dd-1"]
--- more_headers eval
["X-Call-Id: dd-1", "X-Call-Id: dd-1", ""]
--- error_code eval
[200, 200, 200]
--- response_headers eval
['!Idempotent-Replayed' . "\n" . 'X-Call-Id: dd-1',
 'Idempotent-Replayed: true' . "\n" . 'X-Call-Id: dd-1',
 '']
--- response_body_like eval
['\An=1 attempt=1 deadline=- tp=00-[0-9a-f]{32}-[0-9a-f]{16}-00 method=POST body=order=1\n\z',
 '\An=1 attempt=1 deadline=- tp=00-[0-9a-f]{32}-[0-9a-f]{16}-00 method=POST body=order=1\n\z',
 '\An=1 [^\n]*\n\z']
--- no_error_log
[error]



=== TEST 2: the replay has the first answer's status, headers (minus hop-by-hop, Set-Cookie) and body
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        add_header X-Route d;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/created;
    }
    location /created {
        default_type application/vnd.order+json;
        add_header X-Order 42;
        add_header Set-Cookie "s=1; Path=/";
        add_header Cache-Control "private, max-age=5";
        add_header Proxy-Authenticate 'Basic realm="x"';
        return 201 '{"order":42,"bytes":"\x00\x01\xff"}';
    }
--- request eval
["PUT /d\n{}", "PUT /d\n{}"]
--- more_headers
X-Call-Id: dd-2
--- error_code eval
[201, 201]
--- response_headers eval
['Content-Type: application/vnd.order+json' . "\n" . 'X-Order: 42' . "\n" . 'Set-Cookie: s=1; Path=/' . "\n" . 'X-Route: d' . "\n" . 'Cache-Control: private, max-age=5' . "\n" . '!Idempotent-Replayed' . "\n" . 'Proxy-Authenticate: Basic realm="x"',
 'Content-Type: application/vnd.order+json' . "\n" . 'X-Order: 42' . "\n" . '!Set-Cookie' . "\n" . 'X-Route: d' . "\n" . 'Cache-Control: private, max-age=5' . "\n" . 'Idempotent-Replayed: true' . "\n" . 'Content-Length: 35' . "\n" . '!Proxy-Authenticate']
--- response_body eval
['{"order":42,"bytes":"\x00\x01\xff"}', '{"order":42,"bytes":"\x00\x01\xff"}']
--- no_error_log
[error]



=== TEST 3: a chunked, 40 KB answer spooled to a file is replayed byte for byte
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_buffer_size 1k;
        proxy_buffers 2 1k;
        proxy_busy_buffers_size 1k;
        proxy_max_temp_file_size 1m;
        proxy_temp_file_write_size 1k;
        sendfile on;
        limit_rate 40k;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/big;
    }
    location /big {
        echo_duplicate 4000 "0123456789";
        echo "end";
    }
--- request eval
["GET /d", "GET /d"]
--- more_headers
X-Call-Id: dd-3
--- timeout: 5
--- response_headers eval
['!Idempotent-Replayed' . "\n" . 'Transfer-Encoding: chunked',
 'Idempotent-Replayed: true' . "\n" . 'Content-Length: 40004' . "\n" . '!Transfer-Encoding']
--- response_body eval
["0123456789" x 4000 . "end\n", "0123456789" x 4000 . "end\n"]
--- error_log
an upstream response is buffered to a temporary file
--- no_error_log
[error]



=== TEST 4: an answer larger than idem_dedupe_store_max: 409 with the record
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_store_max 16;
        idem_status_url /_idem/calls/;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /d\nx", "POST /d\nx", "GET /log/dd-4"]
--- more_headers eval
["X-Call-Id: dd-4", "X-Call-Id: dd-4", ""]
--- error_code eval
[200, 409, 200]
--- response_headers eval
['',
 'Content-Type: application/problem+json' . "\n" . 'Link: </_idem/calls/dd-4>; rel="status"' . "\n" . '!Retry-After' . "\n" . '!Idempotent-Replayed',
 '']
--- response_body_like eval
["n=1 ",
 '^\{"type":"urn:ngx-idem:problem:answer-not-stored","title":"Answer not stored","status":409,"detail":"[^"]+","call_id":"dd-4","record":\{"call_id":"dd-4",.*"state":"SUCCESS",.*"final_status":200,"executions":1,"attempts":\[\{"execution":1,"n":1,.*"outcome":"ok","sent":true,"status":200,.*\}\]\}\}$',
 '\An=1 [^\n]*\n\z']
--- no_error_log
[error]



=== TEST 4b: a chunked answer (no Content-Length) that outgrows the limit: 409
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_store_max 100;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/chunks;
    }
    location /chunks {
        echo_duplicate 60 "0123456789";
        echo_flush;
        echo_duplicate 60 "abcdefghij";
    }
--- request eval
["GET /d", "GET /d"]
--- more_headers
X-Call-Id: dd-4b
--- error_code eval
[200, 409]
--- response_headers eval
["Transfer-Encoding: chunked", "Content-Type: application/problem+json"]
--- response_body_like eval
['\A(0123456789){60}(abcdefghij){60}\z', '"type":"urn:ngx-idem:problem:answer-not-stored",.*"state":"SUCCESS"']
--- no_error_log
[error]



=== TEST 5: a 503 with Retry-After is not stored: the duplicate runs again
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1/3;
    }
--- request eval
["POST /d\nx", "POST /d\nx", "POST /d\nx"]
--- more_headers
X-Call-Id: dd-5
--- error_code eval
[503, 200, 200]
--- response_headers eval
['Retry-After: 3',
 '!Idempotent-Replayed',
 'Idempotent-Replayed: true']
--- response_body_like eval
["failing 1", "\\An=1 .*\nn=2 [^\n]*\n\\z", "\\An=1 .*\nn=2 [^\n]*\n\\z"]
--- no_error_log
[error]



=== TEST 6: a 429 with Retry-After is not stored either
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/429/1/1;
    }
--- request eval
["POST /d\nx", "POST /d\nx"]
--- more_headers
X-Call-Id: dd-6
--- error_code eval
[429, 200]
--- response_body_like eval
["failing 1", "n=2 "]
--- no_error_log
[error]



=== TEST 7: FAILED with an answer from the upstream (500): replayed, not rerun
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/500/1;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /d\nx", "POST /d\nx", "GET /log/dd-7"]
--- more_headers eval
["X-Call-Id: dd-7", "X-Call-Id: dd-7", ""]
--- error_code eval
[500, 500, 200]
--- raw_response_headers_like eval
["^HTTP/1.1 500 X\r\n", "^HTTP/1.1 500 X\r\n", ""]
--- response_headers eval
['!Idempotent-Replayed',
 'Idempotent-Replayed: true',
 '']
--- response_body_like eval
["failing 1", "failing 1", '\An=1 [^\n]*\n\z']
--- no_error_log
[error]



=== TEST 8: a 503 without Retry-After is an answer: replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1;
    }
--- request eval
["POST /d\nx", "POST /d\nx"]
--- more_headers
X-Call-Id: dd-8
--- error_code eval
[503, 503]
--- response_headers eval
['!Idempotent-Replayed',
 'Idempotent-Replayed: true']
--- response_body_like eval
["failing 1", "failing 1"]
--- no_error_log
[error]



=== TEST 8b: a 204 (no body) is replayed as well
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/nothing;
    }
    location /nothing {
        add_header X-Done yes;
        return 204;
    }
--- request eval
["DELETE /d", "DELETE /d"]
--- more_headers
X-Call-Id: dd-8b
--- error_code eval
[204, 204]
--- response_headers eval
["X-Done: yes\n!Idempotent-Replayed", "X-Done: yes\nIdempotent-Replayed: true"]
--- response_body eval
["", ""]
--- no_error_log
[error]



=== TEST 8c: an answer to HEAD is replayed to the HEAD duplicate, with its length
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fixed;
    }
    location /fixed {
        return 200 "0123456789abcdef";
    }
--- request eval
["HEAD /d", "HEAD /d"]
--- more_headers
X-Call-Id: dd-8c
--- error_code eval
[200, 200]
--- response_headers eval
["!Idempotent-Replayed\nContent-Length: 16",
 "Idempotent-Replayed: true\nContent-Length: 16"]
--- no_error_log
[error]



=== TEST 9: the first execution sent nothing: released, the duplicate runs
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:1;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["POST /d\nx", "POST /d\nx", "GET /calls/dd-9"]
--- more_headers eval
["X-Call-Id: dd-9", "X-Call-Id: dd-9", ""]
--- error_code eval
[502, 502, 200]
--- response_headers eval
['!Idempotent-Replayed',
 '!Idempotent-Replayed',
 '']
--- response_body_like eval
["Bad Gateway", "Bad Gateway",
 '"state":"FAILED",.*"executions":2,"attempts":\[\{"execution":1,"n":1,.*"outcome":"connect_error","sent":false,.*\},\{"execution":2,"n":1,.*"outcome":"connect_error","sent":false,']
--- no_error_log
[alert]



=== TEST 10: the budget was spent before the first attempt: released
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request eval
["POST /d\nx", "POST /d\nx"]
--- more_headers eval
["X-Call-Id: dd-10\nX-Deadline-Ms: 0", "X-Call-Id: dd-10"]
--- error_code eval
[504, 200]
--- response_body_like eval
["deadline-exceeded", '\An=1 ']
--- no_error_log
[error]



=== TEST 11: the same id with another body, URI or method: 422, nothing forwarded
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /d?a=1\namount=10", "POST /d?a=1\namount=11", "POST /d?a=2\namount=10",
 "PUT /d?a=1\namount=10", "POST /d?a=1\namount=1", "POST /d?a=1\n",
 "POST /d?a=1\namount=10", "GET /log/dd-11"]
--- more_headers eval
["X-Call-Id: dd-11", "X-Call-Id: dd-11", "X-Call-Id: dd-11",
 "X-Call-Id: dd-11", "X-Call-Id: dd-11", "X-Call-Id: dd-11",
 "X-Call-Id: dd-11", ""]
--- error_code eval
[200, 422, 422, 422, 422, 422, 200, 200]
--- raw_response_headers_like eval
["", "^HTTP/1.1 422 Unprocessable Content\r\n", "", "", "", "", "", ""]
--- response_headers eval
['',
 'Content-Type: application/problem+json' . "\n" . '!Link',
 '',
 '',
 '',
 '',
 'Idempotent-Replayed: true',
 '']
--- response_body_like eval
["n=1 ",
 '^\{"type":"urn:ngx-idem:problem:payload-mismatch","title":"Call id reused","status":422,"detail":"this call id was used with another method, URI or body","call_id":"dd-11"\}$',
 "payload-mismatch", "payload-mismatch", "payload-mismatch",
 "payload-mismatch", "n=1 ", '\An=1 [^\n]*\n\z']
--- no_error_log
[error]



=== TEST 12: the first execution ended UNKNOWN: 409, never a second execution
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_status_url /_idem/calls/;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/9;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /d\nx", "POST /d\nx", "POST /d\nx", "GET /log/dd-12"]
--- more_headers eval
["X-Call-Id: dd-12", "X-Call-Id: dd-12", "X-Call-Id: dd-12", ""]
--- error_code eval
[504, 409, 409, 200]
--- response_headers eval
['',
 'Link: </_idem/calls/dd-12>; rel="status"' . "\n" . '!Retry-After',
 '',
 '']
--- response_body_like eval
["Gateway",
 '^\{"type":"urn:ngx-idem:problem:call-outcome-unknown",.*"status":409,.*"call_id":"dd-12","record":\{"call_id":"dd-12",.*"state":"UNKNOWN",.*"outcome":"timeout","sent":true,',
 "call-outcome-unknown", '\An=1 [^\n]*\n\z']
--- no_error_log
[alert]



=== TEST 13: in flight: 409 with Retry-After and the status Link
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    log_format dup 'DUP $upstream_status "$upstream_http_retry_after" "$upstream_http_link" "$upstream_http_content_type"';
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_status_url /_idem/calls/;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/800/9;
    }
    location /pair {
        echo_location_async /first;
        echo_sleep 0.3;
        echo_location_async /second;
    }
    location /first {
        proxy_set_header X-Call-Id dd-13;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/d;
    }
    location /second {
        proxy_set_header X-Call-Id dd-13;
        log_subrequest on;
        access_log logs/error.log dup;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/d;
    }
--- request
GET /pair
--- response_body_like chomp
\An=1 [^\n]*\n\{"type":"urn:ngx-idem:problem:call-in-flight","title":"Call in flight","status":409,"detail":"[^"]+","call_id":"dd-13"\}\z
--- error_log
DUP 409 "1" "</_idem/calls/dd-13>; rel=\x22status\x22" "application/problem+json"
--- no_error_log
[error]



=== TEST 14: a claim older than its lease reads as UNKNOWN; the late final write still applies
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_lease 500ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1500/9;
    }
    location /calls/ {
        idem_status;
    }
    location /pair {
        echo_location_async /first;
        echo_sleep 0.9;
        echo "==";
        echo_location_async /second;
        echo "==";
        echo_location_async /status;
        echo_sleep 1.2;
        echo "==";
        echo_location_async /second;
        echo "==";
        echo_location_async /status;
    }
    location /first {
        proxy_set_header X-Call-Id dd-14;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/d;
    }
    location /second {
        proxy_set_header X-Call-Id dd-14;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/d;
    }
    location /status {
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/calls/dd-14;
    }
--- request
GET /pair
--- timeout: 6
--- response_body_like chomp
\An=1 [^\n]*\n==\n\{"type":"urn:ngx-idem:problem:call-outcome-unknown",[^\n]*"state":"UNKNOWN",[^\n]*\}==\n\{"call_id":"dd-14",[^\n]*"state":"UNKNOWN",[^\n]*\}\n==\nn=1 [^\n]*\n==\n\{"call_id":"dd-14",[^\n]*"state":"SUCCESS",[^\n]*"executions":1,[^\n]*\}\n\z
--- no_error_log
[error]



=== TEST 15: an empty scope value: 400, nothing claimed or forwarded
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope $http_authorization;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /d\nx", "POST /d\nx", "GET /log/dd-15"]
--- more_headers eval
["X-Call-Id: dd-15", "X-Call-Id: dd-15\nAuthorization: ", ""]
--- error_code eval
[400, 400, 200]
--- response_headers eval
['Content-Type: application/problem+json' . "\n" . 'X-Call-Id: dd-15',
 '',
 '']
--- response_body eval
['{"type":"urn:ngx-idem:problem:empty-dedupe-scope","title":"No scope","status":400,"detail":"the call\'s scope (who owns its id) is empty: idem_dedupe_scope \\"$http_authorization\\" has no value in this request","call_id":"dd-15"}',
 '{"type":"urn:ngx-idem:problem:empty-dedupe-scope","title":"No scope","status":400,"detail":"the call\'s scope (who owns its id) is empty: idem_dedupe_scope \\"$http_authorization\\" has no value in this request","call_id":"dd-15"}',
 ""]
--- no_error_log
[error]



=== TEST 16: one id under two scopes is two calls; each scope replays its own
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope $http_authorization;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request eval
["POST /d\nx", "POST /d\nx", "POST /d\nx", "POST /d\nx"]
--- more_headers eval
["X-Call-Id: dd-16\nAuthorization: Bearer alice",
 "X-Call-Id: dd-16\nAuthorization: Bearer bob",
 "X-Call-Id: dd-16\nAuthorization: Bearer alice",
 "X-Call-Id: dd-16\nAuthorization: Bearer bob"]
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
['!Idempotent-Replayed',
 '!Idempotent-Replayed',
 'Idempotent-Replayed: true',
 'Idempotent-Replayed: true']
--- response_body_like eval
['\An=1 [^\n]*\n\z', '\An=1 [^\n]*\nn=2 [^\n]*\n\z',
 '\An=1 [^\n]*\n\z', '\An=1 [^\n]*\nn=2 [^\n]*\n\z']
--- no_error_log
[error]



=== TEST 17: the status endpoint reads under the caller's scope only
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope $http_authorization;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_dedupe_scope $http_authorization;
        idem_status;
    }
    location /open-calls/ {
        idem_status;
    }
--- request eval
["POST /d\nx", "GET /calls/dd-17", "GET /calls/dd-17", "GET /calls/dd-17",
 "GET /open-calls/dd-17"]
--- more_headers eval
["X-Call-Id: dd-17\nAuthorization: Bearer alice",
 "Authorization: Bearer alice", "Authorization: Bearer mallory", "",
 "Authorization: Bearer alice"]
--- error_code eval
[200, 200, 404, 400, 404]
--- response_body_like eval
["n=1 ", '"call_id":"dd-17",.*"state":"SUCCESS"', '^\{"state":"NOT_FOUND"\}$',
 "empty-dedupe-scope", '^\{"state":"NOT_FOUND"\}$']
--- no_error_log
[error]



=== TEST 18: a request refused by auth_request or deny claims nothing
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        auth_request /auth;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /denied {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        deny all;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location = /auth {
        internal;
        if ($http_x_allow) {
            return 204;
        }
        return 403;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["POST /d\nx", "POST /denied\nx", "GET /calls/dd-18", "POST /d\nx",
 "GET /calls/dd-18"]
--- more_headers eval
["X-Call-Id: dd-18", "X-Call-Id: dd-18", "", "X-Call-Id: dd-18\nX-Allow: 1",
 ""]
--- error_code eval
[403, 403, 404, 200, 200]
--- response_headers eval
['X-Call-Id: dd-18',
 'X-Call-Id: dd-18',
 '',
 '',
 '']
--- response_body_like eval
["Forbidden", "Forbidden", '^\{"state":"NOT_FOUND"\}$', '\An=1 [^\n]*\n\z',
 '"state":"SUCCESS",.*"executions":1,']
--- no_error_log
[alert]
[crit]



=== TEST 19: Redis unavailable: 503 problem+json, nothing forwarded
--- http_config
    idem_redis 127.0.0.1:1 connect_timeout=100ms;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /d\nx", "GET /log/dd-19"]
--- more_headers eval
["X-Call-Id: dd-19", ""]
--- error_code eval
[503, 200]
--- response_headers eval
['Content-Type: application/problem+json' . "\n" . 'Retry-After: 1' . "\n" . 'X-Call-Id: dd-19',
 '']
--- response_body eval
['{"type":"urn:ngx-idem:problem:dedupe-unavailable","title":"Duplicate check unavailable","status":503,"detail":"the call id could not be claimed: nothing was forwarded","call_id":"dd-19"}',
 ""]
--- no_error_log
[alert]



=== TEST 20: a body spooled to a temporary file is part of the digest
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        client_body_buffer_size 1k;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/200/0;
    }
--- request eval
["POST /d\n" . ("a" x 5000), "POST /d\n" . ("a" x 5000),
 "POST /d\n" . ("a" x 4999) . "b"]
--- more_headers
X-Call-Id: dd-20
--- error_code eval
[200, 200, 422]
--- response_headers eval
['!Idempotent-Replayed',
 'Idempotent-Replayed: true',
 '']
--- response_body_like eval
['\An=1 ', '\An=1 ', "payload-mismatch"]
--- error_log
a client request body is buffered to a temporary file
--- no_error_log
[error]



=== TEST 21: subrequests are never deduped; a route without idem_dedupe is not
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /plain {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        echo_location /sub;
        echo_location /sub;
    }
    location /sub {
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request eval
["POST /plain\nx", "POST /plain\nx", "GET /d"]
--- more_headers eval
["X-Call-Id: dd-21", "X-Call-Id: dd-21", "X-Call-Id: dd-21b"]
--- response_body_like eval
['\An=1 [^\n]*\n\z', '\An=1 [^\n]*\nn=2 [^\n]*\n\z',
 '\An=1 [^\n]*\nn=1 [^\n]*\nn=2 [^\n]*\n\z']
--- no_error_log
[error]



=== TEST 21b: HTTP/2 clients get the same answers (nginx's grpc_pass is the h2 client)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            client_body_buffer_size 1k;
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
        }
    }
--- config
    location /t {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request eval
["POST /t\n" . ("h" x 3000), "POST /t\n" . ("h" x 3000),
 "POST /t\n" . ("h" x 2999) . "i"]
--- more_headers
X-Call-Id: dd-h2
--- error_code eval
[200, 200, 422]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true",
 "Content-Type: application/problem+json"]
--- response_body_like eval
['\An=1 attempt=1 [^\n]* method=POST body=h{3000}\n\z',
 '\An=1 attempt=1 [^\n]* method=POST body=h{3000}\n\z',
 '"type":"urn:ngx-idem:problem:payload-mismatch"']
--- no_error_log
[error]



=== TEST 22: counters for every verdict
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope $http_x_tenant;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["POST /d\nx", "POST /d\nx", "POST /d\ny", "POST /d\nx", "GET /metrics"]
--- more_headers eval
["X-Call-Id: dd-22\nX-Tenant: t", "X-Call-Id: dd-22\nX-Tenant: t",
 "X-Call-Id: dd-22\nX-Tenant: t", "X-Call-Id: dd-22", ""]
--- error_code eval
[200, 200, 422, 400, 200]
--- response_body_like eval
["n=1", "n=1", "mismatch", "scope",
 '(?s)reason="empty_scope"\} 1\n.*idem_dedupe_total\{result="claimed"\} 1\nidem_dedupe_total\{result="replayed"\} 1\nidem_dedupe_total\{result="in_flight"\} 0\nidem_dedupe_total\{result="unknown"\} 0\nidem_dedupe_total\{result="not_stored"\} 0\nidem_dedupe_total\{result="mismatch"\} 1\nidem_dedupe_total\{result="unavailable"\} 0\n']
--- no_error_log
[error]



=== TEST 23: idem_dedupe without idem_dedupe_scope: nginx -t fails
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
    }
--- must_die
--- error_log
"idem_dedupe" is on but "idem_dedupe_scope" is not set



=== TEST 24: idem_dedupe without idem_redis: nginx -t fails
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
    }
--- must_die
--- error_log
"idem_dedupe" is on but there is no "idem_redis" to claim call ids in



=== TEST 25: a dedupe route that generates missing ids gets a warning
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        return 204;
    }
    location /r {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        return 204;
    }
    location /off {
        idem_dedupe on;
        idem_dedupe_scope off;
        return 204;
    }
--- request
GET /d
--- error_code: 204
--- error_log
"idem_dedupe" is on where missing call ids are generated
"idem_dedupe" is on where "idem" is off: it has no effect there
--- no_error_log
[error]



=== TEST 26: bad values of the dedupe directives fail nginx -t
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_status_url "/calls/<x>";
    }
--- must_die
--- error_log
invalid value "/calls/<x>" in "idem_status_url" directive



=== TEST 27: a lease of 0 fails nginx -t
--- config
    location /d {
        idem_dedupe_lease 0;
    }
--- must_die
--- error_log
invalid value "0" in "idem_dedupe_lease" directive, it must be a time greater than 0



=== TEST 28: idem_dedupe_scope twice fails nginx -t
--- config
    location /d {
        idem_dedupe_scope $http_a;
        idem_dedupe_scope off;
    }
--- must_die
--- error_log
"idem_dedupe_scope" directive is duplicate



=== TEST 29: a bad store size fails nginx -t
--- config
    location /d {
        idem_dedupe_store_max 10q;
    }
--- must_die
--- error_log
"idem_dedupe_store_max" directive invalid value



=== TEST 30: a body nginx refuses (413) goes to its error page, not forwarded
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        client_max_body_size 10;
        error_page 413 /too-large;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location = /too-large {
        echo "too large";
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /d\n" . ("x" x 20), "GET /log/dd-30"]
--- more_headers eval
["X-Call-Id: dd-30", ""]
--- error_code eval
[413, 200]
--- response_body eval
["too large\n", ""]
--- no_error_log
[alert]



=== TEST 31: the same with a chunked body: read, refused, error page
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        client_max_body_size 10;
        error_page 413 /too-large;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location = /too-large {
        echo "too large";
    }
--- raw_request eval
"POST /d HTTP/1.1\r
Host: localhost\r
X-Call-Id: dd-31\r
Transfer-Encoding: chunked\r
Connection: close\r
\r
14\r
01234567890123456789\r
0\r
\r
"
--- error_code: 413
--- response_body
too large
--- no_error_log
[alert]



=== TEST 32: proxy_pass with a variable: replayed, and a timeout is UNKNOWN
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        set $b 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        proxy_read_timeout 300ms;
        proxy_pass http://$b$arg_path;
    }
    location /log/ {
        # a variable too: no implicit upstream{} that /d's could match
        set $lb 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        proxy_pass http://$lb;
    }
--- request eval
["POST /d?path=/ok\nx", "POST /d?path=/ok\nx", "GET /log/dd-32",
 "POST /d?path=/sleep/1000/9\nx", "POST /d?path=/sleep/1000/9\nx",
 "GET /log/dd-32b"]
--- more_headers eval
["X-Call-Id: dd-32", "X-Call-Id: dd-32", "",
 "X-Call-Id: dd-32b", "X-Call-Id: dd-32b", ""]
--- error_code eval
[200, 200, 200, 504, 409, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true", "", "", "", ""]
--- response_body_like eval
['\An=1 ', '\An=1 ', '\An=1 [^\n]*\n\z', "Gateway",
 '"type":"urn:ngx-idem:problem:call-outcome-unknown",.*"state":"UNKNOWN"',
 '\An=1 [^\n]*\n\z']
--- error_log
the upstream of this location is not an upstream{} block
--- no_error_log
[alert]
[crit]



=== TEST 33: a redirect to a location with another scope claims under that scope
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        try_files /nonexistent @app;
    }
    location @app {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope $http_authorization;
        rewrite ^ /ok break;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /t\nx", "POST /t\nx", "POST /t\nx"]
--- more_headers eval
["X-Call-Id: dd-33\nAuthorization: tenant-a",
 "X-Call-Id: dd-33\nAuthorization: tenant-b",
 "X-Call-Id: dd-33\nAuthorization: tenant-a"]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", "Idempotent-Replayed: true"]
--- response_body_like eval
['\An=1 [^\n]*\n\z', '\An=1 [^\n]*\nn=2 [^\n]*\n\z', '\An=1 [^\n]*\n\z']
--- no_error_log
[error]



=== TEST 34: a replay goes through gzip as the first answer did
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        gzip on;
        gzip_types text/plain;
        gzip_min_length 1;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/txt;
    }
    location /txt {
        default_type "text/plain; charset=utf-8";
        return 200 "hello hello hello hello\n";
    }
--- request eval
["GET /d", "GET /d"]
--- more_headers
X-Call-Id: dd-34
Accept-Encoding: gzip
--- response_headers eval
["Content-Encoding: gzip\nContent-Type: text/plain; charset=utf-8\n!Idempotent-Replayed",
 "Content-Encoding: gzip\nContent-Type: text/plain; charset=utf-8\nIdempotent-Replayed: true"]
--- no_error_log
[error]



=== TEST 35: an owner's Range is ignored, so that its whole answer is kept
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_force_ranges on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/fixed;
    }
    location /fixed {
        return 200 "0123456789";
    }
--- request eval
["GET /d", "GET /d"]
--- more_headers eval
["X-Call-Id: dd-35\nRange: bytes=2-4", "X-Call-Id: dd-35"]
--- error_code eval
[200, 200]
--- response_body eval
["0123456789", "0123456789"]
--- no_error_log
[error]



=== TEST 36: a scope inherited by a record-only route: an empty value records nothing, no 400
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    idem_dedupe_scope $http_authorization;
    location /r {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_dedupe_scope off;
        idem_status;
    }
--- request eval
["POST /r\nx", "GET /calls/dd-36", "POST /r\nx", "GET /calls/dd-36"]
--- more_headers eval
["X-Call-Id: dd-36", "", "X-Call-Id: dd-36", ""]
--- error_code eval
[200, 404, 200, 404]
--- no_error_log
[error]



=== TEST 37: a 503 with Retry-After over the store limit is released too
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_store_max 1;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1/2;
    }
--- request eval
["POST /d\nx", "POST /d\nx"]
--- more_headers
X-Call-Id: dd-37
--- error_code eval
[503, 200]
--- response_body_like eval
["failing 1", "n=2 "]
--- no_error_log
[error]



=== TEST 38: a body read before the dedupe location is hashed from its buffers
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    client_body_buffer_size 1k;
    location /a {
        echo_read_request_body;
        echo_exec @d;
    }
    location @d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        rewrite ^ /ok break;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /a\n" . ("m" x 3000), "POST /a\n" . ("m" x 3000),
 "POST /a\n" . ("m" x 2999) . "n"]
--- more_headers
X-Call-Id: dd-38
--- error_code eval
[200, 200, 422]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true", ""]
--- response_body_like eval
['\An=1 attempt=1 [^\n]* body=m{3000}\n\z', '\An=1 attempt=1 [^\n]* body=m{3000}\n\z',
 "payload-mismatch"]
--- no_error_log
[error]



=== TEST 39: a body that never comes: the request ends on client_body_timeout, its digest and claim go with it
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    log_format dd39 'DD39 $status upstream=$upstream_addr';
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        client_body_timeout 200ms;
        access_log logs/error.log dd39;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- raw_request eval
"POST /d HTTP/1.1\r
Host: localhost\r
X-Call-Id: dd-39\r
Content-Length: 100\r
Connection: close\r
\r
0123456789"
--- timeout: 10
--- ignore_response
--- error_log
DD39 408 upstream=-
--- no_error_log
[alert]
[crit]
idem dedupe: claim



=== TEST 40: a 304 to the owner's conditional request is not kept: a duplicate gets 409 answer-not-stored, never the 304
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_status_url /_idem/calls/;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/f.txt;
    }
    location = /f.txt {
        root html;
    }
--- user_files
>>> f.txt
0123456789
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /d", "GET /d", "GET /d"]
--- more_headers eval
["X-Call-Id: dd-40\nIf-None-Match: *", "X-Call-Id: dd-40",
 "X-Call-Id: dd-40\nIf-None-Match: *"]
--- error_code eval
[304, 409, 409]
--- response_headers eval
['!Idempotent-Replayed',
 'Content-Type: application/problem+json' . "\n" . '!Idempotent-Replayed',
 'Content-Type: application/problem+json' . "\n" . '!Idempotent-Replayed']
--- response_body_like eval
['\A\z',
 '^\{"type":"urn:ngx-idem:problem:answer-not-stored",.*"call_id":"dd-40","record":\{"call_id":"dd-40",.*"state":"SUCCESS",.*"final_status":304,"executions":1,"attempts":\[\{"execution":1,"n":1,.*"status":304,.*\}\]\}\}$',
 '^\{"type":"urn:ngx-idem:problem:answer-not-stored",.*"final_status":304,"executions":1,']
--- error_log
idem: a 304 answers the owner's condition or range: not kept
--- no_error_log
[error]



=== TEST 41: a 206 to the owner's Range is not kept either: the duplicate without Range gets 409, not the part (TEST 40's gateway)
--- request eval
["GET /d", "GET /d"]
--- more_headers eval
["X-Call-Id: dd-41\nRange: bytes=2-4", "X-Call-Id: dd-41"]
--- error_code eval
[206, 409]
--- response_headers eval
['Content-Range: bytes 2-4/11' . "\n" . '!Idempotent-Replayed',
 '!Content-Range' . "\n" . '!Idempotent-Replayed']
--- response_body_like eval
['\A234\z',
 '^\{"type":"urn:ngx-idem:problem:answer-not-stored",.*"call_id":"dd-41","record":\{.*"state":"SUCCESS",.*"final_status":206,"executions":1,']
--- no_error_log
[error]



=== TEST 42: a 412 to the owner's If-Match and a 416 to its Range are not kept: 409 for the duplicates (TEST 40's gateway)
--- request eval
["GET /d", "GET /d", "GET /d", "GET /d"]
--- more_headers eval
["X-Call-Id: dd-42a\nIf-Match: \"nope\"", "X-Call-Id: dd-42a",
 "X-Call-Id: dd-42b\nRange: bytes=100-", "X-Call-Id: dd-42b"]
--- error_code eval
[412, 409, 416, 409]
--- response_headers eval
['!Idempotent-Replayed', '!Idempotent-Replayed', '!Idempotent-Replayed',
 '!Idempotent-Replayed']
--- response_body_like eval
['412 Precondition Failed',
 '^\{"type":"urn:ngx-idem:problem:answer-not-stored",.*"call_id":"dd-42a",.*"final_status":412,"executions":1,',
 '416 Requested Range Not Satisfiable',
 '^\{"type":"urn:ngx-idem:problem:answer-not-stored",.*"call_id":"dd-42b",.*"final_status":416,"executions":1,']
--- no_error_log
[error]



=== TEST 43: a condition that did not apply leaves the whole answer, which is replayed; a 412 of the upstream's own (no precondition sent) is replayed too
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/f.txt;
    }
    location /p {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/refuse;
    }
    location = /f.txt {
        root html;
    }
    location = /refuse {
        return 412 "the application says no\n";
    }
--- user_files
>>> f.txt
0123456789
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /d", "GET /d", "POST /p\nx", "POST /p\nx"]
--- more_headers eval
["X-Call-Id: dd-43a\nIf-None-Match: \"nope\"", "X-Call-Id: dd-43a",
 "X-Call-Id: dd-43b", "X-Call-Id: dd-43b"]
--- error_code eval
[200, 200, 412, 412]
--- response_headers eval
['!Idempotent-Replayed', 'Idempotent-Replayed: true',
 '!Idempotent-Replayed', 'Idempotent-Replayed: true']
--- response_body eval
["0123456789\n", "0123456789\n", "the application says no\n",
 "the application says no\n"]
--- no_error_log
[error]



=== TEST 44: idem_dedupe_store_max 0 keeps no answer, an empty body's neither (its headers are the answer): 409 answer-not-stored; a 503 with Retry-After is still released
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_store_max 0;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/made;
    }
    location /r {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_store_max 0;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1/2;
    }
    location /made {
        add_header Location /orders/7;
        return 201 "";
    }
--- request eval
["POST /d\nx", "POST /d\nx", "POST /r\nx", "POST /r\nx"]
--- more_headers eval
["X-Call-Id: dd-44a", "X-Call-Id: dd-44a", "X-Call-Id: dd-44b",
 "X-Call-Id: dd-44b"]
--- error_code eval
[201, 409, 503, 200]
--- response_headers eval
["Location: /orders/7\n!Idempotent-Replayed",
 "!Location\n!Idempotent-Replayed\nContent-Type: application/problem+json",
 "", ""]
--- response_body_like eval
['\A\z',
 '^\{"type":"urn:ngx-idem:problem:answer-not-stored",.*"record":\{"call_id":"dd-44a",.*"state":"SUCCESS",.*"final_status":201,"executions":1,',
 "failing 1", "n=2 "]
--- no_error_log
[error]
