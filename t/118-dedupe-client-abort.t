# idem_dedupe_client_abort: on a dedupe route the owner's upstream call
# runs to its end when its client leaves (run, the default), so that its
# answer is stored for the client's resend; "abort" keeps nginx's own
# behaviour (the upstream connection closed, the call UNKNOWN).  The
# budget and the upstream's timeouts still end the call.  The client is
# curl in the background, giving up after 1 s (--max-time 1); the
# service (util/backend.pl /sleep/1600/1) answers at 1.6 s and counts
# every request of a call id (/log/ID).  A block waits for the record to
# reach its final state (settled()), then resends.

# Not under valgrind: the blocks race a client's timeout against the
# service's answer, and valgrind's slowness would decide them.
BEGIN {
    if ($ENV{TEST_NGINX_USE_VALGRIND}) {
        require Test::More;
        Test::More::plan(skip_all => 'a client timeout against a slow '
                                     . 'service: not under valgrind');
    }
}

use lib 't/lib';
use IO::Socket::INET ();
use POSIX ();
use Time::HiRes ();
use IdemBg qw(bg done);
use IdemPaths qw(h2_url);
use Test::Nginx::Socket 'no_plan';

# TEST 6 asks for its replay (through grpc_pass, with trailers) with
# HTTP/1.0: the real Test::Nginx decodes trailer fields only when a Trailer
# header announces them, and nginx's chunked filter sends none.

# No repeat_each(2): dedupe of fixed call ids; the backend counts the
# requests of each id across runs.

# the record of an id, through /status/ (the block's idem_status), once
# its last execution has ended (at most 15 s): its JSON
sub settled {
    my ($id) = @_;
    my $json = '';
    for (1 .. 300) {
        $json = `curl -s --noproxy '*' @{[ url("/status/$id") ]}`;
        return $json if $json =~ /"state":"(?:SUCCESS|FAILED|UNKNOWN)"/;
        Time::HiRes::sleep(0.05);
    }
    return $json;
}

sub url {
    return "http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}$_[0]";
}

# an HTTP/2 client that sends a call on stream 1, gives up after $after s
# and resets the stream (RST_STREAM, CANCEL), its connection kept open;
# the socket, to close once the test is over
sub h2_reset {
    my ($url, $id, $body, $after) = @_;
    my ($port, $path) = $url =~ m{^http://127\.0\.0\.1:(\d+)(/.*)$};
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port)
        or die "connect: $!";
    my $str = sub { chr(length $_[0]) . $_[0] };
    my $block = join '', map { "\0" . $str->($_->[0]) . $str->($_->[1]) }
        [':method', 'POST'], [':scheme', 'http'], [':path', $path],
        [':authority', 'localhost'], ['x-call-id', $id],
        ['content-length', length $body];
    my $frame = sub {
        my ($type, $flags, $payload) = @_;
        return substr(pack('N', length $payload), 1)
               . pack('CCN', $type, $flags, 1) . $payload;
    };
    $s->syswrite("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                 . substr(pack('N', 0), 1) . pack('CCN', 4, 0, 0)
                 . $frame->(1, 4, $block) . $frame->(0, 1, $body));
    Time::HiRes::sleep($after);
    $s->syswrite($frame->(3, 0, pack('N', 8)));
    return $s;
}

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: the client leaves at 1 s, the service answers at 1.6 s: the call runs on, SUCCESS, and the resend gets the stored answer
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1600/1;
    }
    location /status/ {
        idem_status;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
main::bg('gone1', 'ca-1', '--max-time', '1', '--data', 'x=1',
         main::url('/pay'));
Test::More::is(main::done('gone1'), '', 'the client gave up');
Test::More::like(main::settled('ca-1'),
                 qr/"state":"SUCCESS".*"outcome":"ok","sent":true,"status":200/,
                 'the call ran on to its answer');
--- request eval
["POST /pay\nx=1", "GET /log/ca-1"]
--- more_headers eval
["X-Call-Id: ca-1", ""]
--- error_code eval
[200, 200]
--- response_headers_like eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
["^n=1 attempt=1 [^\n]*\n\$", "^n=1 [^\n]*\n\$"]
--- no_error_log
[error]



=== TEST 1b: ... an answer of 1 MB, written to the connection the client closed: the write that fails leaves the rest to be kept only, and the resend gets it whole
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_store_max 2m;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/slow;
    }
    location /slow {
        echo_sleep 1.6;
        echo_duplicate 100000 "0123456789";
    }
    location /status/ {
        idem_status;
    }
--- init
main::bg('gone1b', 'ca-1b', '--max-time', '1', '--data', 'x=1',
         main::url('/pay'));
Test::More::is(main::done('gone1b'), '', 'the client gave up');
Test::More::like(main::settled('ca-1b'),
                 qr/"state":"SUCCESS".*"outcome":"ok","sent":true,"status":200/,
                 'the call ran on to its answer');
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: ca-1b
--- response_headers
Idempotent-Replayed: true
Content-Length: 1000000
--- response_body_like eval
qr/\A(?:0123456789){50000}(?:0123456789){50000}\z/
--- error_log
the client went during the answer, the rest is only kept
--- no_error_log
[error]



=== TEST 2: idem_dedupe_client_abort abort: nginx closes the upstream call, UNKNOWN, the resend gets 409 call-outcome-unknown
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_client_abort abort;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1600/1;
    }
    location /status/ {
        idem_status;
    }
--- init
main::bg('gone2', 'ca-2', '--max-time', '1', '--data', 'x=1',
         main::url('/pay'));
main::done('gone2');
Test::More::like(main::settled('ca-2'),
                 qr/"state":"UNKNOWN".*"outcome":"client_abort","sent":true/,
                 'the call was cut when its client left');
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: ca-2
--- error_code: 409
--- response_body_like chomp
"type":"[^"]*call-outcome-unknown"
--- no_error_log
[error]



=== TEST 3: a route without dedupe is unchanged: the client leaves, the upstream call is cut (client_abort, UNKNOWN)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1600/1;
    }
    location /status/ {
        idem_status;
    }
--- init
main::bg('gone3', 'ca-3', '--max-time', '1', '--data', 'x=1',
         main::url('/pay'));
main::done('gone3');
--- request eval
"GET /status/ca-3"
--- response_body_like chomp
"state":"UNKNOWN".*"outcome":"client_abort","sent":true
--- error_log
client prematurely closed connection, so upstream connection is closed too
--- no_error_log
[error]



=== TEST 4: a budget shorter than the service: the call that runs on ends at its deadline (UNKNOWN, outcome deadline); the resend gets 409
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_deadline 1300ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1600/1;
    }
    location /status/ {
        idem_status;
    }
--- init
main::bg('gone4', 'ca-4', '--max-time', '1', '--data', 'x=1',
         main::url('/pay'));
main::done('gone4');
my $json = main::settled('ca-4');
Test::More::like($json, qr/"state":"UNKNOWN".*"outcome":"deadline","sent":true/,
                 'the call ended at its budget');
my ($d) = $json =~ /"duration_ms":(\d+)/;
Test::More::cmp_ok($d, '>=', 1250, 'after its budget, not when the client left');
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: ca-4
--- error_code: 409
--- response_body_like chomp
"type":"[^"]*call-outcome-unknown"
--- error_log
upstream timed out
--- no_error_log
[alert]
[crit]



=== TEST 5: HTTP/2: the client's connection closes at 1 s: the owner's stream runs on to the answer (SUCCESS), the resend gets it replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location /pay {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_call_id_missing reject;
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1600/1;
        }
    }
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1600/1;
    }
    location /status/ {
        idem_status;
    }
--- init
main::bg('gone5', 'ca-5', '--http2-prior-knowledge', '--max-time', '1',
         '--data', 'x=1', main::h2_url('/pay'));
Test::More::is(main::done('gone5'), '', 'the client gave up');
Test::More::like(main::settled('ca-5'),
                 qr/"state":"SUCCESS".*"outcome":"ok","sent":true,"status":200/,
                 'the stream ran on to its answer');
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: ca-5
--- response_headers
Idempotent-Replayed: true
--- response_body_like eval
qr/^n=1 attempt=1 [^\n]*\n\z/
--- no_error_log
[error]



=== TEST 5b: HTTP/2: the client resets its stream at 1 s (RST_STREAM, its connection open): the stream runs on to the answer, the resend gets it replayed; counted in idem_dedupe_client_gone_total
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location /pay {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_call_id_missing reject;
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1600/1;
        }
    }
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1600/1;
    }
    location /status/ {
        idem_status;
    }
    location /metrics {
        idem_metrics;
    }
--- init
my $s = main::h2_reset(main::h2_url('/pay'), 'ca-5b', 'x=1', 1);
Test::More::like(main::settled('ca-5b'),
                 qr/"state":"SUCCESS".*"outcome":"ok","sent":true,"status":200/,
                 'the stream ran on to its answer');
close $s;
--- request eval
["POST /pay\nx=1", "GET /metrics"]
--- more_headers eval
["X-Call-Id: ca-5b", ""]
--- response_headers_like eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
[qr/^n=1 attempt=1 [^\n]*\n\z/,
 qr/^idem_dedupe_client_gone_total 1\n/m]
--- no_error_log
[error]



=== TEST 6: gRPC over HTTP/2: the client leaves at 1 s, the service's answer (grpc-status 0 in its trailers) comes at 1.6 s: SUCCESS, the resend gets it replayed with its trailers
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    log_format trl 'TRAILER "$upstream_trailer_grpc_status" "$upstream_http_idempotent_replayed"';
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location /svc/ {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_call_id_missing reject;
            grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location / {
            add_trailer grpc-status 0;
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1600/1;
        }
    }
--- config
    location /svc/ {
        access_log logs/error.log trl;
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
    location /status/ {
        idem_status;
    }
--- init
main::bg('gone6', 'ca-6', '--http2-prior-knowledge', '--max-time', '1',
         '-H', 'Content-Type: application/grpc', '--data', 'm1',
         main::h2_url('/svc/Call'));
Test::More::is(main::done('gone6'), '', 'the client gave up');
Test::More::like(main::settled('ca-6'),
                 qr/"state":"SUCCESS".*"outcome":"ok","sent":true,"status":200/,
                 'the call ran on to its answer');
--- request
POST /svc/Call HTTP/1.0
m1
--- more_headers
Content-Type: application/grpc
X-Call-Id: ca-6
--- response_headers
Idempotent-Replayed: true
--- response_body_like eval
qr/^n=1 attempt=1 [^\n]*\n\z/
--- error_log
TRAILER "0" "true"
--- no_error_log
[error]



=== TEST 7: the client leaves during the backoff between two attempts (t/150 without dedupe: no further attempt): the owner's call still makes its second attempt, SUCCESS, and the resend gets its answer
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_idempotent on;
        idem_retry 3 backoff=10ms max_backoff=5s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1/1;
    }
    location /status/ {
        idem_status;
    }
--- init
main::bg('gone7', 'ca-7', '--max-time', '0.5', '--data', 'x=1',
         main::url('/pay'));
Test::More::is(main::done('gone7'), '', 'the client gave up');
Test::More::like(main::settled('ca-7'),
                 qr/"state":"SUCCESS".*"outcome":"http_503".*"outcome":"ok","sent":true,"status":200/,
                 'the second attempt ran after the client left');
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: ca-7
--- response_headers
Idempotent-Replayed: true
--- response_body_like eval
qr/^n=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*\n\z/
--- no_error_log
[error]
