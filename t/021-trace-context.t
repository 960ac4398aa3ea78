# W3C Trace Context through the gateway (docs/tracing.md, "Trace context"):
# the client's traceparent keeps its parent id and its flags (no span of
# the module's is exported here, so none becomes a parent), its tracestate
# passes on combined and checked, and a call that came without a sampling
# decision is sampled as idem_otel_sample says.  The backend reports the
# traceparent and tracestate it got.

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): the retry blocks count attempts per fixed call id at
# util/backend.pl, which a second run would find answered already.

no_long_string();
no_shuffle();
run_tests();

# a tracestate of n members k1=v.., each "len" bytes long
sub members {
    my ($n, $len, $prefix) = @_;
    $prefix //= 'k';
    return join ',', map {
        my $k = "$prefix$_=";
        $k . ('v' x ($len - length $k))
    } 1 .. $n;
}

__DATA__

=== TEST 1: the client's traceparent, not sampled: parent id and flags 00 reach the upstream
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "trace=$http_x_trace_id tp=$http_traceparent ts=[$http_tracestate]";
    }
--- request
GET /t
--- more_headers
traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00
--- response_headers
X-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736
--- response_body
trace=4bf92f3577b34da6a3ce929d0e0e4736 tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00 ts=[]
--- no_error_log
[error]



=== TEST 2: the client's traceparent, sampled: parent id and flags 01 reach the upstream
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "tp=$http_traceparent ts=[$http_tracestate]";
    }
--- request
GET /t
--- more_headers
traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
--- response_body
tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ts=[]
--- no_error_log
[error]



=== TEST 3: other flag bits are kept as sent (version 00)
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "tp=$http_traceparent";
    }
--- request eval
[("GET /t") x 4]
--- more_headers eval
["traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
 "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02",
 "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-81",
 "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff"]
--- response_body eval
["tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03\n",
 "tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02\n",
 "tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-81\n",
 "tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff\n"]
--- no_error_log
[error]



=== TEST 4: a later version: version 00 goes on, with its ids and only its sampled flag
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "tp=$http_traceparent ts=[$http_tracestate]";
    }
--- request eval
[("GET /t") x 4]
--- more_headers eval
["traceparent: 01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-later\r\ntracestate: congo=t61rcWkgMzE",
 "traceparent: cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02",
 "traceparent: 01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
 "traceparent: 01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01future"]
--- response_body_like eval
["^tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ts=\\[congo=t61rcWkgMzE\\]\$",
 "^tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00 ts=\\[\\]\$",
 "^tp=00-(?!4bf92f3577b34da6a3ce929d0e0e4736)([0-9a-f]{32})-(?!00f067aa0ba902b7)[0-9a-f]{16}-00 ts=\\[\\]\$",
 "^tp=00-(?!4bf92f3577b34da6a3ce929d0e0e4736)([0-9a-f]{32})-(?!00f067aa0ba902b7)[0-9a-f]{16}-00 ts=\\[\\]\$"]
--- no_error_log
[error]



=== TEST 5: with tracestate, flags 00 and 01: both headers pass on as sent, once each
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo -n $echo_client_request_headers;
    }
--- request eval
[("GET /t") x 2]
--- more_headers eval
["traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00\r\ntracestate: rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
 "TraceParent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\nTraceState: rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE"]
--- response_body_like eval
["\\A(?s)(?:(?!(?i)trace(?:parent|state)).)*traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00\\r\\ntracestate: rojo=00f067aa0ba902b7,congo=t61rcWkgMzE\\r\\n(?:(?!(?i)trace(?:parent|state)).)*\\z",
 "\\A(?s)(?:(?!(?i)trace(?:parent|state)).)*traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\\r\\ntracestate: rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE\\r\\n(?:(?!(?i)trace(?:parent|state)).)*\\z"]
--- no_error_log
[error]



=== TEST 6: the trace id from X-Trace-Id, no traceparent: a span of its own, not sampled; a tracestate is dropped
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "trace=$http_x_trace_id tp=$http_traceparent ts=[$http_tracestate]";
    }
--- request eval
[("GET /t") x 2]
--- more_headers eval
["X-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736",
 "X-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736\r\ntracestate: congo=t61rcWkgMzE"]
--- response_body_like eval
[("^trace=4bf92f3577b34da6a3ce929d0e0e4736 tp=00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-00 ts=\\[\\]\$") x 2]
--- no_error_log
[error]



=== TEST 7: X-Trace-Id and a traceparent of the same trace: the traceparent's parent, flags and tracestate pass on
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "trace=$http_x_trace_id tp=$http_traceparent ts=[$http_tracestate]";
    }
--- request eval
[("GET /t") x 2]
--- more_headers eval
["X-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\ntracestate: congo=t61rcWkgMzE",
 "X-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"]
--- response_body eval
["trace=4bf92f3577b34da6a3ce929d0e0e4736 tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ts=[congo=t61rcWkgMzE]\n",
 "trace=4bf92f3577b34da6a3ce929d0e0e4736 tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00 ts=[]\n"]
--- no_error_log
[error]



=== TEST 8: X-Trace-Id and a traceparent of another trace: X-Trace-Id wins (SPEC); the traceparent's parent, flags and tracestate do not pass
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "trace=$http_x_trace_id tp=$http_traceparent ts=[$http_tracestate]";
    }
--- request eval
[("GET /t") x 2]
--- more_headers eval
["X-Trace-Id: 11111111111111111111111111111111\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\ntracestate: congo=t61rcWkgMzE",
 "X-Trace-Id: chain-8\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\ntracestate: congo=t61rcWkgMzE"]
--- response_body_like eval
["^trace=11111111111111111111111111111111 tp=00-11111111111111111111111111111111-(?!00f067aa0ba902b7)[0-9a-f]{16}-00 ts=\\[\\]\$",
 "^trace=chain-8 tp= ts=\\[\\]\$"]
--- no_error_log
[error]



=== TEST 9: an invalid traceparent is ignored, and the tracestate beside it dropped
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "trace=$http_x_trace_id tp=$http_traceparent ts=[$http_tracestate]";
    }
--- request eval
[("GET /t") x 5]
--- more_headers eval
["traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra\r\ntracestate: congo=t61rcWkgMzE",
 "traceparent: ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\ntracestate: congo=t61rcWkgMzE",
 "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01\r\ntracestate: congo=t61rcWkgMzE",
 "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01\r\ntracestate: congo=t61rcWkgMzE",
 "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\ntracestate: congo=t61rcWkgMzE"]
--- response_body_like eval
[("^trace=(?!4bf92f3577b34da6a3ce929d0e0e4736)([0-9a-f]{32}) tp=00-\\1-(?!00f067aa0ba902b7)[0-9a-f]{16}-00 ts=\\[\\]\$") x 5]
--- no_error_log
[error]



=== TEST 10: a tracestate without a traceparent is dropped
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
tracestate: congo=t61rcWkgMzE
TraceState: rojo=00f067aa0ba902b7
--- response_body_like chomp
\A(?s)(?:(?!(?i)tracestate).)*traceparent: 00-[0-9a-f]{32}-[0-9a-f]{16}-00\r\n(?:(?!(?i)tracestate).)*\z
--- no_error_log
[error]



=== TEST 11: a tracestate in several lines goes on as one, combined in order (RFC 9110)
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo -n $echo_client_request_headers;
    }
--- request eval
[("GET /t") x 2]
--- more_headers eval
["traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\ntracestate: rojo=00f067aa0ba902b7\r\nX-Between: 1\r\ntracestate: congo=t61rcWkgMzE,lemon=1\r\nTRACESTATE: apple=2",
 "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00\r\ntracestate: rojo=1\r\ntracestate: rojo=2"]
--- response_body_like eval
["\\A(?s)(?:(?!(?i)tracestate).)*\\r\\ntracestate: rojo=00f067aa0ba902b7,congo=t61rcWkgMzE,lemon=1,apple=2\\r\\n(?:(?!(?i)tracestate).)*\\z",
 "\\A(?s)(?:(?!(?i)tracestate).)*traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00\\r\\n(?:(?!(?i)tracestate).)*\\z"]
--- no_error_log
[error]



=== TEST 12: an invalid tracestate is dropped, the traceparent kept
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "tp=$http_traceparent ts=[$http_tracestate]";
    }
--- request eval
[("GET /t") x 11]
--- more_headers eval
[map { "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\ntracestate: $_" }
 "Congo=1",
 "foo=1,foo=2",
 main::members(33, 8),
 "foo",
 "foo=",
 "foo=a=b",
 "-foo=1",
 "foo =1",
 "k" . ("x" x 256) . "=1",
 "k=" . ("v" x 257),
 "rojo=1,congo"]
--- response_body eval
[("tp=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 ts=[]\n") x 11]
--- no_error_log
[error]



=== TEST 13: what W3C allows passes on as sent: 32 members, long keys and values, empty members, spaces
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "tp=$http_traceparent ts=[$http_tracestate]";
    }
--- request eval
[("GET /t") x 5]
--- more_headers eval
[map { "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00\r\ntracestate: $_" }
 main::members(32, 8),
 "k" . ("x" x 255) . "=1",
 "k=" . ("v" x 256),
 "foo=1,,bar=2 ,\tbaz= lead,",
 "a\@b=1,0x/y*z_-=2"]
--- response_body eval
[map { "tp=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00 ts=[$_]\n" }
 main::members(32, 8),
 "k" . ("x" x 255) . "=1",
 "k=" . ("v" x 256),
 "foo=1,,bar=2 ,\tbaz= lead,",
 "a\@b=1,0x/y*z_-=2"]
--- no_error_log
[error]



=== TEST 14: a tracestate of only empty members sends none
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
traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
tracestate: , ,
--- response_body_like chomp
\A(?s)(?:(?!(?i)tracestate).)*traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n(?:(?!(?i)tracestate).)*\z
--- no_error_log
[error]



=== TEST 15: over 512 bytes: whole members dropped, those over 128 bytes first, then from the end
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "ts=[$http_tracestate]";
    }
--- request eval
[("GET /t") x 3]
--- more_headers eval
[map { "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\ntracestate: $_" }
 "big=" . ("v" x 196) . "," . main::members(4, 100),
 main::members(6, 100),
 main::members(2, 100) . "\r\ntracestate: " . main::members(4, 100, 'j')]
--- response_body eval
["ts=[" . main::members(4, 100) . "]\n",
 "ts=[" . main::members(5, 100) . "]\n",
 "ts=[" . main::members(2, 100) . "," . main::members(3, 100, 'j') . "]\n"]
--- no_error_log
[error]



=== TEST 16: retries with the client's traceparent: every attempt the client's parent and flags (nothing exported)
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=10ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/2;
    }
--- request eval
[("GET /t") x 2]
--- more_headers eval
["X-Call-Id: tc-retry-00\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
 "X-Call-Id: tc-retry-01\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]
--- response_body_like eval
["\\An=1 attempt=1 deadline=- tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00 method=GET body=\\nn=2 attempt=2 deadline=- tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00 method=GET body=\\nn=3 attempt=3 deadline=- tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00 method=GET body=\\n\\z",
 "\\An=1 attempt=1 deadline=- tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 method=GET body=\\nn=2 attempt=2 deadline=- tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 method=GET body=\\nn=3 attempt=3 deadline=- tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 method=GET body=\\n\\z"]
--- no_error_log
[error]



=== TEST 17: retries without a client traceparent: each attempt its own span, the same flags
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=10ms;
        idem_deadline 10s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/2;
    }
    location /s {
        idem on;
        idem_otel_sample 1;
        idem_idempotent on;
        idem_retry 3 backoff=10ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/2;
    }
--- request eval
["GET /t", "GET /s"]
--- more_headers eval
["X-Call-Id: tc-retry-own\r\nX-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736",
 "X-Call-Id: tc-retry-own-s\r\nX-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736"]
--- response_body_like eval
["\\An=1 attempt=1 deadline=\\d+ tp=00-4bf92f3577b34da6a3ce929d0e0e4736-([0-9a-f]{16})-00 method=GET body=\\nn=2 attempt=2 deadline=\\d+ tp=00-4bf92f3577b34da6a3ce929d0e0e4736-(?!\\1)([0-9a-f]{16})-00 method=GET body=\\nn=3 attempt=3 deadline=\\d+ tp=00-4bf92f3577b34da6a3ce929d0e0e4736-(?!\\1)(?!\\2)[0-9a-f]{16}-00 method=GET body=\\n\\z",
 "\\An=1 attempt=1 deadline=- tp=00-4bf92f3577b34da6a3ce929d0e0e4736-([0-9a-f]{16})-01 method=GET body=\\nn=2 attempt=2 deadline=- tp=00-4bf92f3577b34da6a3ce929d0e0e4736-(?!\\1)([0-9a-f]{16})-01 method=GET body=\\nn=3 attempt=3 deadline=- tp=00-4bf92f3577b34da6a3ce929d0e0e4736-(?!\\1)(?!\\2)[0-9a-f]{16}-01 method=GET body=\\n\\z"]
--- no_error_log
[error]



=== TEST 18: the record keeps each attempt's own span id, whichever parent its upstream got
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        idem_idempotent on;
        idem_retry 2 backoff=5ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1;
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /t", "GET /calls/tc-rec"]
--- more_headers
X-Call-Id: tc-rec
traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
--- response_body_like eval
["\\An=1 attempt=1 deadline=- tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 method=GET body=\\nn=2 attempt=2 deadline=- tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 method=GET body=\\n\\z",
 '"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736",.*"attempts":\[\{"execution":1,"n":1,[^}]*"status":503,"span_id":"(?!00f067aa0ba902b7)([0-9a-f]{16})"\},\{"execution":1,"n":2,[^}]*"status":200,"span_id":"(?!00f067aa0ba902b7)(?!\1)[0-9a-f]{16}"\}\]\}$']
--- no_error_log
[error]



=== TEST 19: idem_otel_sample 1: a call without a sampling decision is sampled; the client's decision stands
--- config
    location /t {
        idem on;
        idem_otel_sample 1;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "tp=$http_traceparent";
    }
--- request eval
[("GET /t") x 4]
--- more_headers eval
["",
 "X-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736",
 "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
 "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]
--- response_body_like eval
["^tp=00-[0-9a-f]{32}-[0-9a-f]{16}-01\$",
 "^tp=00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01\$",
 "^tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00\$",
 "^tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\$"]
--- no_error_log
[error]



=== TEST 20: idem_otel_sample 0 (and the default): not sampled; inherited, and set again in a location
--- http_config
    idem_otel_sample 1;
--- config
    location /t {
        idem on;
        idem_otel_sample 0;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /i {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "tp=$http_traceparent";
    }
--- request eval
["GET /t", "GET /i", "GET /t"]
--- more_headers eval
["", "", "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]
--- response_body_like eval
["^tp=00-[0-9a-f]{32}-[0-9a-f]{16}-00\$",
 "^tp=00-[0-9a-f]{32}-[0-9a-f]{16}-01\$",
 "^tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\$"]
--- no_error_log
[error]



=== TEST 21: a ratio decides a W3C trace id by its low 64 bits: the same trace, the same decision
--- config
    location /t {
        idem on;
        idem_otel_sample 0.5;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "tp=$http_traceparent";
    }
--- request eval
[("GET /t") x 4]
--- more_headers eval
["X-Trace-Id: 4bf92f3577b34da60000000000000001",
 "X-Trace-Id: 4bf92f3577b34da6000000000007a11f",
 "X-Trace-Id: 4bf92f3577b34da6000000000007a120",
 "X-Trace-Id: 4bf92f3577b34da600000000000f423f"]
--- response_body_like eval
["^tp=00-4bf92f3577b34da60000000000000001-[0-9a-f]{16}-01\$",
 "^tp=00-4bf92f3577b34da6000000000007a11f-[0-9a-f]{16}-01\$",
 "^tp=00-4bf92f3577b34da6000000000007a120-[0-9a-f]{16}-00\$",
 "^tp=00-4bf92f3577b34da600000000000f423f-[0-9a-f]{16}-00\$"]
--- no_error_log
[error]



=== TEST 22: idem_otel_sample 0.5 over 200 calls with generated trace ids: between 40 and 160 sampled
--- http_config
    log_format tc_flags "$upstream_http_x_seen_tp";
--- config
    location /t {
        idem on;
        idem_otel_sample 0.5;
        access_log logs/tc-flags.log tc_flags;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        add_header X-Seen-Tp $http_traceparent;
        return 204;
    }
    location = /flags {
        alias logs/tc-flags.log;
    }
--- request eval
[("GET /t") x 200, "GET /flags"]
--- error_code eval
[(204) x 200, 200]
--- response_body_like eval
[("^\$") x 200,
 '(?:\A|(?<=\n))(?=(?:[^\n]*\n){200}\z)(?:(?:00-[0-9a-f]{32}-[0-9a-f]{16}-00\n)*00-[0-9a-f]{32}-[0-9a-f]{16}-01\n){40,160}(?:00-[0-9a-f]{32}-[0-9a-f]{16}-00\n)*\z']
--- no_error_log
[error]



=== TEST 23: gRPC: the client's traceparent and tracestate reach a grpc_pass upstream as over HTTP
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
            add_header X-Seen-Tp $http_traceparent;
            add_header X-Seen-Ts "[$http_tracestate]";
            add_header grpc-status 0;
            return 200;
        }
    }
--- config
    location /g/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request eval
[("POST /g/svc/Call\nx") x 3]
--- more_headers eval
["Content-Type: application/grpc\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00\r\ntracestate: congo=t61rcWkgMzE",
 "Content-Type: application/grpc\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
 "Content-Type: application/grpc\r\nX-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736\r\ntracestate: congo=t61rcWkgMzE"]
--- response_headers_like eval
["X-Seen-Tp: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00\nX-Seen-Ts: \\[congo=t61rcWkgMzE\\]",
 "X-Seen-Tp: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\nX-Seen-Ts: \\[\\]",
 "X-Seen-Tp: 00-4bf92f3577b34da6a3ce929d0e0e4736-(?!00f067aa0ba902b7)[0-9a-f]{16}-00\nX-Seen-Ts: \\[\\]"]
--- no_error_log
[error]



=== TEST 24: idem_otel_sample takes a ratio from 0 to 1
--- config
    location /t { idem_otel_sample 1.5; }
--- must_die
--- error_log
invalid value "1.5" in "idem_otel_sample" directive, it must be a ratio from 0 to 1 with at most six decimals



=== TEST 25: idem_otel_sample: not a number, negative, seven decimals
--- config
    location /t { idem_otel_sample half; }
    location /u { idem_otel_sample -0.5; }
    location /v { idem_otel_sample 0.1234567; }
--- must_die
--- error_log
invalid value "half" in "idem_otel_sample" directive, it must be a ratio from 0 to 1 with at most six decimals



=== TEST 26: idem_otel_sample twice in one place
--- config
    location /t { idem_otel_sample 0.5; idem_otel_sample 0.25; }
--- must_die
--- error_log
"idem_otel_sample" directive is duplicate



=== TEST 27: an X-Trace-Id of 32 zeros on a sampled route, a traceparent of another trace beside it: no traceparent upstream (the zero trace id is invalid to W3C), the trace id as sent
--- config
    location /t {
        idem on;
        idem_otel_sample 1;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "trace=$http_x_trace_id tp=[$http_traceparent] ts=[$http_tracestate]";
    }
--- request eval
["GET /t", "GET /t"]
--- more_headers eval
["X-Trace-Id: 00000000000000000000000000000000",
 "X-Trace-Id: 00000000000000000000000000000000\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\ntracestate: k=v"]
--- response_body eval
[("trace=00000000000000000000000000000000 tp=[] ts=[]\n") x 2]
--- no_error_log
[error]
