# gRPC requests (Content-Type application/grpc): the module's own answers
# are gRPC statuses (Trailers-Only), records follow grpc-status, gRPC's
# UNAVAILABLE is retried on idempotent routes.  The test client reaches the
# gateway through nginx's own gRPC client (grpc_pass), the gateway listens
# HTTP/2 and passes to a "service" that nginx plays with add_trailer, or
# that proxies to util/backend.pl's /grpc/ paths.  A real gRPC client
# library: t/165-grpc-client.t.

use IO::Socket::INET ();
use Test::Nginx::Socket 'no_plan';

# An answer with trailers over HTTP/1.1 (a replay, through grpc_pass) is
# asked for with HTTP/1.0, or read by the test itself (raw_exchange): the
# real Test::Nginx decodes trailer fields only when a Trailer header
# announces them, and neither nginx's chunked filter nor the replay sends
# one.

# No repeat_each(2): dedupe and retries of fixed call ids: the backend counts
# attempts per id (util/backend.pl) and Redis keeps the first run's claims.

no_long_string();
no_shuffle();
check_accum_error_log();
run_tests();

# a gRPC call over HTTP/1.1 on a connection kept alive, as raw bytes
sub grpc_h1 {
    my ($method, $id, $body, @more) = @_;
    return "$method /h1/svc/Call HTTP/1.1\r\nHost: localhost\r\n"
           . "Content-Type: application/grpc\r\nX-Call-Id: $id\r\n"
           . join('', map { "$_\r\n" } @more)
           . (defined $body
              ? "Content-Length: " . length($body) . "\r\n\r\n$body"
              : "\r\n");
}

# the request after it, that closes the connection
sub next_close {
    return "GET /next HTTP/1.1\r\nHost: localhost\r\nConnection: close"
           . "\r\n\r\n";
}

# sends $req on a connection of its own to the block's server: all it
# got back, to the close
sub raw_exchange {
    my ($req) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $ENV{TEST_NGINX_SERVER_PORT},
                                  Timeout => 10)
        or die "connect: $!";
    print $s $req;
    local $/;
    my $raw = <$s> // '';
    close $s;
    return $raw;
}

__DATA__

=== TEST 1: an invalid call id is INVALID_ARGUMENT (3), Trailers-Only, nothing forwarded
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location / {
            return 200 "reached";
        }
    }
--- config
    location /g/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request
POST /g/svc/Call
x
--- more_headers
Content-Type: application/grpc
X-Call-Id: bad id
--- error_code: 200
--- response_headers
Content-Type: application/grpc
grpc-status: 3
grpc-message: Invalid call id: header X-Call-Id: byte 0x20 at offset 3 is not allowed
!X-Call-Id
--- response_body
--- no_error_log
[error]



=== TEST 2: a budget spent before the first attempt is DEADLINE_EXCEEDED (4); a gRPC content type with a suffix counts
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location / {
            return 200 "reached";
        }
    }
--- config
    location /g/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request
POST /g/svc/Call
x
--- more_headers
Content-Type: application/grpc+proto
X-Call-Id: g-2
X-Deadline-Ms: 0
--- error_code: 200
--- response_headers
Content-Type: application/grpc
grpc-status: 4
grpc-message: Deadline exceeded: the call's budget was spent before the first attempt
X-Call-Id: g-2
--- response_body
--- no_error_log
[error]



=== TEST 3: the same answers stay HTTP problems for requests that are not gRPC
--- config
    location /t {
        idem on;
        return 200 "reached";
    }
--- request
POST /t
x
--- more_headers
Content-Type: application/grpc-web
X-Call-Id: bad id
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
!grpc-status
--- no_error_log
[error]



=== TEST 4: nginx's own 502 and 504 on a gRPC call are UNAVAILABLE (14) and DEADLINE_EXCEEDED (4)
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location /g/dead/ {
            idem on;
            grpc_pass grpc://127.0.0.1:1;
        }
        location /g/slow/ {
            idem on;
            idem_deadline 300ms;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location / {
            echo_sleep 2;
            echo reached;
        }
    }
--- config
    location /g/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request eval
["POST /g/dead/Call\nx", "POST /g/slow/Call\nx"]
--- more_headers eval
["Content-Type: application/grpc\nX-Call-Id: g-4a",
 "Content-Type: application/grpc\nX-Call-Id: g-4b"]
--- error_code eval
[200, 200]
--- response_headers eval
["Content-Type: application/grpc\ngrpc-status: 14\ngrpc-message: Upstream unavailable\nX-Call-Id: g-4a",
 "Content-Type: application/grpc\ngrpc-status: 4\ngrpc-message: Deadline exceeded\nX-Call-Id: g-4b"]
--- response_body eval
["", ""]
--- no_error_log
[alert]
--- timeout: 5



=== TEST 5: dedupe: another message is FAILED_PRECONDITION (9), a replay keeps the service's grpc-status
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location / {
            add_header grpc-status 0;
            return 200 "pong";
        }
    }
--- config
    location /g/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /g/svc/Call\nm1", "POST /g/svc/Call\nm1", "POST /g/svc/Call\nm2"]
--- more_headers eval
["Content-Type: application/grpc\nX-Call-Id: g-5",
 "Content-Type: application/grpc\nX-Call-Id: g-5",
 "Content-Type: application/grpc\nX-Call-Id: g-5"]
--- error_code eval
[200, 200, 200]
--- response_headers eval
["grpc-status: 0\n!Idempotent-Replayed",
 "grpc-status: 0\nIdempotent-Replayed: true",
 "grpc-status: 9\nContent-Type: application/grpc\ngrpc-message: Call id reused: this call id was used with another method, URI or body"]
--- response_body eval
["pong", "pong", ""]
--- no_error_log
[error]



=== TEST 5b: dedupe: a duplicate while the first runs is ABORTED (10)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    log_format dup 'DUP $upstream_status "$upstream_http_grpc_status" "$upstream_http_content_type"';
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location / {
            echo_sleep 0.8;
            echo pong;
        }
    }
--- config
    location /pair {
        echo_location_async /first;
        echo_sleep 0.3;
        echo_location_async /second;
    }
    location /first {
        rewrite ^ /g/svc/Call break;
        grpc_set_header X-Call-Id g-5b;
        grpc_set_header Content-Type application/grpc;
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
    location /second {
        rewrite ^ /g/svc/Call break;
        grpc_set_header X-Call-Id g-5b;
        grpc_set_header Content-Type application/grpc;
        log_subrequest on;
        access_log logs/error.log dup;
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request
GET /pair
--- response_body_like chomp
\Apong\n\z
--- error_log
DUP 200 "10" "application/grpc"
--- no_error_log
[error]



=== TEST 6: dedupe with Redis unreachable is UNAVAILABLE (14) with grpc-retry-pushback-ms
--- http_config
    idem_redis 127.0.0.1:1 timeout=200ms;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location / {
            return 200 "reached";
        }
    }
--- config
    location /g/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request
POST /g/svc/Call
x
--- more_headers
Content-Type: application/grpc
X-Call-Id: g-6
--- error_code: 200
--- response_headers
Content-Type: application/grpc
grpc-status: 14
grpc-retry-pushback-ms: 1000
!Retry-After
--- response_body
--- no_error_log
[alert]



=== TEST 7: records follow grpc-status: 0 SUCCESS, INTERNAL FAILED, DEADLINE_EXCEEDED and CANCELLED UNKNOWN; each attempt shows its grpc-status
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            idem_record on;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location /g/svc/Ok {
            add_trailer grpc-status 0;
            return 200 "pong";
        }
        location /g/svc/Internal {
            add_trailer grpc-status 13;
            add_trailer grpc-message boom;
            return 200 "x";
        }
        location /g/svc/Deadline {
            add_trailer grpc-status 4;
            return 200 "x";
        }
        location /g/svc/Cancelled {
            add_header grpc-status 1;
            return 200;
        }
    }
--- config
    location /g/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
    location /calls/ {
        idem on;
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /g/svc/Ok\nx", "POST /g/svc/Internal\nx", "POST /g/svc/Deadline\nx",
 "POST /g/svc/Cancelled\nx",
 "GET /calls/g-7a", "GET /calls/g-7b", "GET /calls/g-7c", "GET /calls/g-7d"]
--- more_headers eval
["Content-Type: application/grpc\nX-Call-Id: g-7a",
 "Content-Type: application/grpc\nX-Call-Id: g-7b",
 "Content-Type: application/grpc\nX-Call-Id: g-7c",
 "Content-Type: application/grpc\nX-Call-Id: g-7d",
 "", "", "", ""]
--- response_body_like eval
["pong", "x", "x", "",
 '"state":"SUCCESS".*"outcome":"ok".*"grpc_status":0\}',
 '"state":"FAILED".*"outcome":"ok".*"grpc_status":13\}',
 '"state":"UNKNOWN".*"grpc_status":4\}',
 '"state":"UNKNOWN".*"grpc_status":1\}']
--- wait: 0.3
--- no_error_log
[error]



=== TEST 8: idempotent route: a Trailers-Only UNAVAILABLE is retried with the same call id
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            idem_idempotent on;
            idem_retry 3 backoff=10ms;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location /g/svc/Flaky {
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/grpc/14/1;
        }
    }
--- config
    location /g/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /g/svc/Flaky\nx", "GET /log/g-8"]
--- more_headers eval
["Content-Type: application/grpc\nX-Call-Id: g-8", ""]
--- error_code eval
[200, 200]
--- response_headers eval
["grpc-status: 0", ""]
--- response_body_like eval
['\An=1 attempt=1 .*\nn=2 attempt=2 ', '\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*\n\z']
--- no_error_log
[error]



=== TEST 9: no retry on a route not marked idempotent, nor after a negative grpc-retry-pushback-ms; the client gets the service's status
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location /g/svc/Plain {
            idem on;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
        location /g/svc/Pushback {
            idem on;
            idem_idempotent on;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location /g/svc/Plain {
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/grpc/14/1;
        }
        location /g/svc/Pushback {
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/grpc/14/1/-1;
        }
    }
--- config
    location /g/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /g/svc/Plain\nx", "POST /g/svc/Pushback\nx", "GET /log/g-9a",
 "GET /log/g-9b"]
--- more_headers eval
["Content-Type: application/grpc\nX-Call-Id: g-9a",
 "Content-Type: application/grpc\nX-Call-Id: g-9b", "", ""]
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
["grpc-status: 14\ngrpc-message: failing 1",
 "grpc-status: 14\ngrpc-message: failing 1", "", ""]
--- response_body_like eval
['\A\z', '\A\z', '\An=1 [^\n]*\n\z', '\An=1 [^\n]*\n\z']
--- no_error_log
[error]



=== TEST 10: a retryable status with a pushback: the next attempt waits for it
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            idem_idempotent on;
            idem_retry 3 backoff=1ms max_backoff=1ms;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
            add_header X-Took $request_time always;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location /g/svc/Push {
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/grpc/14/1/400;
        }
    }
--- config
    location /g/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request
POST /g/svc/Push
x
--- more_headers
Content-Type: application/grpc
X-Call-Id: g-10
--- error_code: 200
--- response_headers_like
grpc-status: 0
X-Took: (?:0\.[4-9]|[1-4]\.)\d+
--- no_error_log
[error]



=== TEST 11: a replay of a gRPC answer sends its trailers again (grpc-status 0 in the trailers, not only the message)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    log_format trl 'TRAILER "$upstream_trailer_grpc_status" "$upstream_trailer_grpc_message" "$upstream_http_idempotent_replayed"';
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location / {
            add_trailer grpc-status 0;
            add_trailer grpc-message "all%20good";
            return 200 "pong";
        }
    }
--- config
    location /pair {
        echo_location /call;
        echo_location /call;
    }
    location /call {
        rewrite ^ /g/svc/Call break;
        grpc_set_header X-Call-Id g-11;
        grpc_set_header Content-Type application/grpc;
        log_subrequest on;
        access_log logs/error.log trl;
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request
GET /pair
--- response_body chomp
pongpong
--- error_log
TRAILER "0" "all%20good" "-"
TRAILER "0" "all%20good" "true"
--- no_error_log
[error]



=== TEST 12: a pushback longer than a call without a budget may wait: no retry, the service's own answer (HTTP 200, grpc-status 14)
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            idem_idempotent on;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location /g/svc/Long {
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/grpc/14/1/20000;
        }
    }
--- config
    location /g/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /g/svc/Long\nx", "GET /log/g-12"]
--- more_headers eval
["Content-Type: application/grpc\nX-Call-Id: g-12", ""]
--- error_code eval
[200, 200]
--- response_headers eval
["grpc-status: 14\ngrpc-retry-pushback-ms: 20000", ""]
--- response_body_like eval
['\A\z', '\An=1 [^\n]*\n\z']
--- error_log
is longer than a call without a budget may wait
--- no_error_log
[error]



=== TEST 13: over HTTP/1.1 a module answer is a whole message (Content-Length: 0, not chunked), and its connection serves the next request
--- http_config
    log_format h1 'H1 $connection_requests $status "$sent_http_content_length" "$sent_http_transfer_encoding" "$sent_http_grpc_status" $request';
--- config
    location /h1/ {
        idem on;
        access_log logs/error.log h1;
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
    location = /next {
        access_log logs/error.log h1;
        return 200 "next\n";
    }
--- raw_request eval
main::grpc_h1('POST', 'bad id', 'x')
. main::grpc_h1('POST', 'g-13', 'x', 'X-Deadline-Ms: 0')
. main::grpc_h1('HEAD', 'bad id') . main::next_close()
--- error_code: 200
--- response_headers
Content-Type: application/grpc
Content-Length: 0
grpc-status: 3
!Transfer-Encoding
--- response_body
--- error_log
H1 1 200 "0" "-" "3" POST /h1/svc/Call HTTP/1.1
H1 2 200 "0" "-" "4" POST /h1/svc/Call HTTP/1.1
H1 3 200 "0" "-" "3" HEAD /h1/svc/Call HTTP/1.1
H1 4 200 "5" "-" "-" GET /next HTTP/1.1
--- no_error_log
[error]



=== TEST 14: over HTTP/1.1 nginx's own 502 on a gRPC call: UNAVAILABLE (14) with Content-Length: 0; the next request on the connection is answered
--- http_config
    log_format h1 'H1 $connection_requests $status "$sent_http_content_length" "$sent_http_transfer_encoding" $request';
--- config
    location /h1/ {
        idem on;
        access_log logs/error.log h1;
        grpc_pass grpc://127.0.0.1:1;
    }
    location = /next {
        access_log logs/error.log h1;
        return 200 "next\n";
    }
--- raw_request eval
main::grpc_h1('POST', 'g-14', 'x') . main::next_close()
--- error_code: 200
--- response_headers
Content-Type: application/grpc
Content-Length: 0
grpc-status: 14
grpc-message: Upstream unavailable
X-Call-Id: g-14
!Transfer-Encoding
--- response_body
--- error_log
H1 1 200 "0" "-" POST /h1/svc/Call HTTP/1.1
H1 2 200 "5" "-" GET /next HTTP/1.1
--- no_error_log
[alert]
[crit]



=== TEST 15: HTTP/1.0 gets Content-Length: 0 as well
--- http_config
    log_format h1 'H1 $server_protocol $status "$sent_http_content_length" "$sent_http_grpc_status" $request';
--- config
    location /h1/ {
        idem on;
        access_log logs/error.log h1;
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request
POST /h1/svc/Call HTTP/1.0
x
--- more_headers
Content-Type: application/grpc
X-Call-Id: bad id
--- error_code: 200
--- response_headers
grpc-status: 3
Content-Length: 0
--- response_body
--- error_log
H1 HTTP/1.0 200 "0" "3" POST /h1/svc/Call HTTP/1.0
--- no_error_log
[error]



=== TEST 16: HTTP/2 stays Trailers-Only: no length, one HEADERS frame that ends the stream
--- http_config
    log_format h2 'H2 $server_protocol $status "$sent_http_content_length" "$sent_http_grpc_status" $request';
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            access_log logs/error.log h2;
            grpc_pass grpc://127.0.0.1:1;
        }
    }
--- config
    location /g/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request
POST /g/svc/Call
x
--- more_headers
Content-Type: application/grpc
X-Call-Id: bad id
--- error_code: 200
--- response_headers
grpc-status: 3
--- response_body
--- error_log
H2 HTTP/2.0 200 "-" "3" POST /g/svc/Call HTTP/2.0
http2 output header: "grpc-status: 3"
--- no_error_log
http2 output header: "content-length
[error]



=== TEST 17: ... nginx's own 502 over HTTP/2 as well (TEST 16's gateway)
--- request
POST /g/svc/Call
x
--- more_headers
Content-Type: application/grpc
X-Call-Id: g-17
--- error_code: 200
--- response_headers
grpc-status: 14
--- response_body
--- error_log
H2 HTTP/2.0 200 "-" "14" POST /g/svc/Call HTTP/2.0
--- no_error_log
http2 output header: "content-length
[alert]
[crit]



=== TEST 18: a stored gRPC answer, first over HTTP/1.1 ...
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    log_format h1 'H1 $connection_requests $status "$sent_http_content_length" "$sent_http_transfer_encoding" "$sent_http_idempotent_replayed" "$sent_trailer_grpc_status" $request';
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location / {
            add_trailer grpc-status 0;
            return 200 "pong";
        }
    }
--- config
    location /h1/ {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        access_log logs/error.log h1;
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
    }
    location = /next {
        access_log logs/error.log h1;
        return 200 "next\n";
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request
POST /h1/svc/Call
m1
--- more_headers
Content-Type: application/grpc
X-Call-Id: g-18
--- error_code: 200
--- response_body chomp
pong
--- error_log
H1 1 200 "4" "-" "-" "0" POST /h1/svc/Call HTTP/1.1
--- no_error_log
[error]



=== TEST 19: ... replayed over HTTP/1.1: chunked, its trailers in the last chunk, and the connection goes on
--- init
# read here, not by the harness: the real Test::Nginx decodes trailer
# fields only where a Trailer header announces them, as neither nginx's
# chunked filter nor the replay does
my $raw = main::raw_exchange(main::grpc_h1('POST', 'g-18', 'm1')
                             . main::next_close());
Test::More::like($raw, qr{\AHTTP/1\.1 200 [^\r]*\r\n(?:[^\r]+\r\n)*?Transfer-Encoding: chunked\r\n}s,
                 'the replay: 200, chunked');
Test::More::like($raw, qr{\AHTTP/1\.1 200 (?:[^\r]*\r\n)*?Idempotent-Replayed: true\r\n}s,
                 '... replayed');
Test::More::like($raw, qr{\r\n\r\n4\r\npong\r\n0\r\ngrpc-status: 0\r\n\r\nHTTP/1\.1 200 }s,
                 '... pong, then grpc-status 0 in the last chunk, then the next answer on the connection');
Test::More::like($raw, qr{\r\n\r\nnext\n\z}, '... which is whole');
--- request
GET /next
--- response_body
next
--- error_log
H1 1 200 "-" "chunked" "true" "0" POST /h1/svc/Call HTTP/1.1
H1 2 200 "5" "-" "-" "-" GET /next HTTP/1.1
--- no_error_log
[error]



=== TEST 20: idem_dedupe_replay grpc=OK: a Trailers-Only UNAVAILABLE (14) is not kept, the claim is released and the resend runs again; its OK is kept and replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_dedupe_replay grpc=OK;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location /g/svc/Pay {
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/grpc/14/1;
        }
    }
--- config
    location /g/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /g/svc/Pay\nm1", "POST /g/svc/Pay\nm1", "POST /g/svc/Pay\nm1",
 "GET /log/g-20"]
--- more_headers eval
["Content-Type: application/grpc\nX-Call-Id: g-20",
 "Content-Type: application/grpc\nX-Call-Id: g-20",
 "Content-Type: application/grpc\nX-Call-Id: g-20", ""]
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
["grpc-status: 14\n!Idempotent-Replayed",
 "grpc-status: 0\n!Idempotent-Replayed",
 "grpc-status: 0\nIdempotent-Replayed: true", ""]
--- response_body_like eval
["\\A\\z", "\\An=1 [^\n]*\nn=2 [^\n]*\n\\z", "\\An=1 [^\n]*\nn=2 [^\n]*\n\\z",
 "\\An=1 [^\n]*\nn=2 [^\n]*\n\\z"]
--- no_error_log
[error]



=== TEST 21: idem_dedupe_replay grpc=OK,NOT_FOUND reads grpc-status in the trailers: NOT_FOUND (5) is kept and replayed, UNAVAILABLE (14) is not (the resend runs again: the service's log shows two requests)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            idem on;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_dedupe_replay 2xx grpc=OK,NOT_FOUND;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location /g/svc/Find {
            add_trailer grpc-status 5;
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
        }
        location /g/svc/Down {
            add_trailer grpc-status 14;
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
        }
    }
--- config
    location /g/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /g/svc/Find HTTP/1.0\nm1", "POST /g/svc/Find HTTP/1.0\nm1",
 "POST /g/svc/Down HTTP/1.0\nm1", "POST /g/svc/Down HTTP/1.0\nm1"]
--- more_headers eval
["Content-Type: application/grpc\nX-Call-Id: g-21a",
 "Content-Type: application/grpc\nX-Call-Id: g-21a",
 "Content-Type: application/grpc\nX-Call-Id: g-21b",
 "Content-Type: application/grpc\nX-Call-Id: g-21b"]
--- error_code eval
[200, 200, 200, 200]
--- response_body_like eval
["\\An=1 [^\n]*\n\\z", "\\An=1 [^\n]*\n\\z",
 "\\An=1 [^\n]*\n\\z", "\\An=1 [^\n]*\nn=2 [^\n]*\n\\z"]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true",
 "!Idempotent-Replayed", "!Idempotent-Replayed"]
--- no_error_log
[error]
