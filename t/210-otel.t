# Spans exported over OTLP/HTTP (idem_otel_endpoint) to a test collector
# that parses every request with opentelemetry-proto's own definitions
# (t/lib/otlp_collector.py, t/data/otel-proto/): the span tree whole, from
# the client's span to the backend's parent, through a retry with backoff,
# a dedupe replay, a 422, a 409 and a waiter; what is not exported; the
# collector down, paused and slow (calls answered at once, drops counted);
# the queue's bound; a reload (what the old workers queued is sent); how
# the exporter reads answers it did not expect (t/lib/RawHttpPeer.pm: a
# chunk's data that ends as the last chunk does, a 204 with bytes after
# it, two lengths, a second Connection header, an empty Content-Length,
# lines ended by a bare LF): when it keeps the connection.
#
# Each block's --- init makes its calls once nginx runs its config, waits
# for their spans at the collector and checks them; its request reads the
# counters.

use lib 't/lib';
use IdemWait ();
use IdemBg qw(bg done);
use IdemOtel ();
use Test::Nginx::Socket 'no_plan';

$ENV{TEST_NGINX_OTEL_PORT} ||=
    ($ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT} || 1984) + 500;
# nothing listens there: a collector that is down
$ENV{TEST_NGINX_OTEL_DOWN_PORT} ||= $ENV{TEST_NGINX_OTEL_PORT} + 1;

if (my $why = IdemOtel::missing()) {
    Test::More::plan(skip_all => $why);
}

IdemOtel::start();

# TEST 12-16: a collector whose answers are the test's bytes
use RawHttpPeer ();
$ENV{TEST_NGINX_OTEL_RAW_PORT} ||= $ENV{TEST_NGINX_OTEL_PORT} + 2;
our $RawDir = IdemPaths::scratch() . '/otel-raw';
our $RawPid = RawHttpPeer::start($ENV{TEST_NGINX_OTEL_RAW_PORT}, $RawDir);

END { local $?; IdemOtel::stop(); RawHttpPeer::stop($RawPid) }

# Two calls, each a batch of its two spans, to the raw collector answering
# @parts: both batches counted sent; the second on the connection of the
# first if the answer lets the exporter keep it ($kept), else on a new one
sub raw_ok {
    my ($what, $kept, @parts) = @_;
    RawHttpPeer::answer($RawDir, @parts);
    my $sent = IdemWait::metric('idem_otel_spans_total{result="sent"}') // 0;
    my $r0 = RawHttpPeer::requests($RawDir);
    my $t = IdemOtel::hexid(32);
    for my $i (1, 2) {
        call('/pay', "otel-raw-$i", tp($t, IdemOtel::hexid(16)));
        metric_is('idem_otel_spans_total{result="sent"}', $sent + 2 * $i,
                  "$what: batch $i counted sent");
    }
    my @conn = RawHttpPeer::request_connections($RawDir);
    Test::More::is(@conn - $r0, 2, "$what: two requests");
    if ($kept) {
        Test::More::is($conn[-1], $conn[-2],
                       "$what: the connection kept for the second");
    } else {
        Test::More::isnt($conn[-1], $conn[-2],
                         "$what: the first connection not kept");
    }
}

# one call, at once: its status and how long it took (curl's seconds)
sub call {
    my ($path, $id, $traceparent, @curl) = @_;
    my @h = ('-H', "X-Call-Id: $id");
    push @h, '-H', "traceparent: $traceparent" if defined $traceparent;
    open my $fh, '-|', 'curl', '-s', '--noproxy', '*', '-o', '/dev/null',
        '--max-time', '10', '-w', '%{http_code} %{time_total}', @h, @curl,
        "http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}$path"
        or die "curl: $!";
    my $out = do { local $/; <$fh> };
    close $fh;
    return split ' ', $out;
}

sub tp { "00-$_[0]-$_[1]-" . ($_[2] // '01') }

# the traceparents the backend got for a call id, in order
sub backend_parents {
    my ($id) = @_;
    my $log = IdemWait::get($ENV{TEST_NGINX_BACKEND_PORT}, "/log/$id");
    return map { /tp=00-[0-9a-f]{32}-([0-9a-f]{16})-/ ? $1 : '-' }
           grep { length } split /\n/, $log;
}

# The call whose client span is $client in trace $trace: its SERVER span
# (the client's span its parent), and its $n attempts' CLIENT spans (the
# server span their parent), checked; with $id, each attempt's span is the
# parent the backend got for it.  Returns the server span and the attempts.
sub tree_ok {
    my ($trace, $client, $n, $id, $what) = @_;
    my @all = IdemOtel::spans($trace);
    my @srv = grep { $_->{kind} == 2 && $_->{parentSpanId} eq $client } @all;
    Test::More::is(scalar @srv, 1, "$what: one server span, the client's "
                   . "span its parent");
    my $srv = $srv[0] or return;
    my @att = sort { $a->{attributes}{'idem.attempt'}
                     <=> $b->{attributes}{'idem.attempt'} }
              grep { $_->{parentSpanId} eq $srv->{spanId} } @all;
    Test::More::is(scalar @att, $n, "$what: $n attempt spans, its children");
    Test::More::is(join(',', map { $_->{kind} } @att), join(',', (3) x $n),
                   "$what: the attempts are CLIENT spans");
    Test::More::is(join(',', map { $_->{attributes}{'idem.attempt'} } @att),
                   join(',', 1 .. $n), "$what: attempts 1 to $n");
    if (defined $id) {
        # the upstream's parent is its attempt's span: the tree goes on
        # into the service (ngx_http_idem_trace_upstream_parent)
        Test::More::is(join(',', backend_parents($id)),
                       join(',', map { $_->{spanId} } @att),
                       "$what: each upstream's parent is its attempt's span");
    }
    my %ids = map { $_->{spanId} => 1 } @all;
    # (server spans: their client's span, checked above)
    my @orphans = grep { $_->{kind} != 2 && !$ids{$_->{parentSpanId}} }
                  @all;
    Test::More::is(scalar @orphans, 0, "$what: no span without its parent");
    Test::More::is(IdemOtel::errors(), '', "$what: every request parsed");
    return ($srv, @att);
}

sub metric_is {
    my ($name, $want, $what) = @_;
    Test::More::ok(IdemWait::wait_for("$name at $want",
        sub { (IdemWait::metric($name) // -1) == $want }),
        $what // "$name is $want");
}

# No repeat_each(2): the blocks count spans and calls exactly.  A master
# process: TEST 11 reloads.

master_on();
no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: a call retried after a 503, with backoff: the tree whole, one trace, attributes
--- http_config
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_OTEL_PORT/v1/traces;
    idem_otel_service_name gw-test;
    idem_otel_flush 50ms;
--- config
    location /pay {
        idem on;
        idem_idempotent on;
        idem_deadline 10s;
        idem_retry 3 backoff=30ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/1;
    }
    location /metrics {
        idem_metrics;
    }
--- init
my ($t, $c) = (IdemOtel::hexid(32), IdemOtel::hexid(16));
my ($code) = main::call('/pay', 'otel-retry-1', main::tp($t, $c));
Test::More::is($code, 200, 'the call succeeds on its second attempt');
Test::More::is(scalar IdemOtel::wait_spans($t, 3), 3, 'three spans came');
my ($srv, @a) = main::tree_ok($t, $c, 2, 'otel-retry-1', 'retry');
my %s = %{ $srv->{attributes} };
Test::More::is($srv->{name}, 'GET /pay', 'the server span: method and route');
Test::More::is($srv->{service}, 'gw-test', 'service.name');
Test::More::is($srv->{scope}, 'ngx_idem_module', 'the scope');
Test::More::is("$s{'http.request.method'} $s{'url.path'} "
               . "$s{'http.response.status_code'} $s{'server.address'}",
               'GET /pay 200 127.0.0.1', 'its semantic attributes');
Test::More::is("$s{'idem.call_id'} $s{'idem.call_id.source'} "
               . "$s{'idem.state'} $s{'idem.attempts'}",
               'otel-retry-1 client SUCCESS 2', 'its own attributes');
Test::More::is($srv->{status}, 0, 'a success: status unset');
Test::More::ok(!exists $s{'idem.dedupe'}, 'no dedupe on this route');
my %a1 = %{ $a[0]{attributes} };
my %a2 = %{ $a[1]{attributes} };
Test::More::is("$a1{'http.response.status_code'} $a1{'idem.outcome'} "
               . "$a[0]{status}", '503 http_503 2',
               'attempt 1: the 503, status ERROR');
Test::More::is($a1{'network.peer.address'},
               "127.0.0.1:$ENV{TEST_NGINX_BACKEND_PORT}",
               'attempt 1: its peer');
Test::More::ok($a1{'idem.budget_remaining_ms'} > 0
               && $a1{'idem.budget_remaining_ms'} <= 10000,
               'attempt 1: its budget left');
Test::More::ok(!exists $a1{'idem.retry_reason'}, 'attempt 1: no reason');
Test::More::is("$a2{'http.response.status_code'} $a2{'idem.outcome'} "
               . "$a2{'idem.retry_reason'} $a[1]{status}", '200 ok http_503 0',
               'attempt 2: retried after the 503, a success');
Test::More::ok(defined $a2{'idem.backoff_ms'} && $a2{'idem.backoff_ms'} >= 0
               && $a2{'idem.backoff_ms'} <= 60, "attempt 2: its backoff "
               . "($a2{'idem.backoff_ms'} ms)");
# (an attempt's end is its start and its duration, on another clock
# than the next one's start: a millisecond or two apart)
Test::More::ok($a[0]{start} >= $srv->{start} && $a[1]{end} <= $srv->{end}
               && $a[0]{end} <= $a[1]{start} + 2_000_000, 'the times nest');
main::metric_is('idem_otel_spans_total{result="sent"}', 3);
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="sent"\} 3
idem_otel_spans_total\{result="dropped"\} 0
--- no_error_log
[error]
[warn]



=== TEST 2: not sampled by the client, a route without idem, a call without a traceparent: nothing exported
--- http_config
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_OTEL_PORT/v1/traces;
    idem_otel_flush 50ms;
--- config
    location /pay {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /plain {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
my @t = map { IdemOtel::hexid(32) } 1 .. 4;
my $c = IdemOtel::hexid(16);
my $before = () = IdemOtel::spans();
main::call('/pay', 'otel-unsampled', main::tp($t[0], $c, '00'));
main::call('/plain', 'otel-plain', main::tp($t[1], $c));
main::call('/pay', 'otel-no-tp', undef, '-H', "X-Trace-Id: $t[2]");
main::call('/pay', 'otel-sampled', main::tp($t[3], $c));
Test::More::is(scalar IdemOtel::wait_spans($t[3], 2), 2,
               'the sampled call\'s spans came');
main::metric_is('idem_otel_spans_total{result="sent"}', 2);
Test::More::is(scalar(() = IdemOtel::spans()) - $before, 2,
               'and no other span');
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="sent"\} 2
idem_otel_spans_total\{result="dropped"\} 0
--- no_error_log
[error]



=== TEST 2b: a call without a traceparent on a route with idem_otel_sample 1: exported, its server span a root, each upstream's traceparent sampled (01) under its attempt's span; idem_otel_sample 0 beside it exports nothing
--- http_config
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_OTEL_PORT/v1/traces;
    idem_otel_flush 50ms;
--- config
    location /all {
        idem on;
        idem_otel_sample 1;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /none {
        idem on;
        idem_otel_sample 0;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
my @t = map { IdemOtel::hexid(32) } 1 .. 2;
my $before = () = IdemOtel::spans();
main::call('/none', 'otel-ratio-0', undef, '-H', "X-Trace-Id: $t[1]");
main::call('/all', 'otel-ratio-1', undef, '-H', "X-Trace-Id: $t[0]");
my @s = IdemOtel::wait_spans($t[0], 2);
Test::More::is(scalar @s, 2, 'the sampled route\'s two spans came');
my ($srv) = grep { $_->{kind} == 2 } @s;
my ($att) = grep { $_->{kind} == 3 } @s;
Test::More::is($srv && ($srv->{parentSpanId} // ''), '',
               'the server span is a root: no client span');
Test::More::is($att && $att->{parentSpanId}, $srv && $srv->{spanId},
               'the attempt under it');
my $log = IdemWait::get($ENV{TEST_NGINX_BACKEND_PORT}, '/log/otel-ratio-1');
my ($p, $f) = $log =~ /tp=00-$t[0]-([0-9a-f]{16})-([0-9a-f]{2})/;
Test::More::is($p, $att && $att->{spanId}, "the upstream's parent: the attempt's span");
Test::More::is($f, '01', '... sampled');
$log = IdemWait::get($ENV{TEST_NGINX_BACKEND_PORT}, '/log/otel-ratio-0');
Test::More::like($log, qr/tp=00-$t[1]-[0-9a-f]{16}-00/,
                 'the unsampled route: flags 00');
main::metric_is('idem_otel_spans_total{result="sent"}', 2);
Test::More::is(scalar(() = IdemOtel::spans()) - $before, 2,
               'and no other span');
Test::More::is(IdemOtel::errors(), '', 'every request parsed');
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="sent"\} 2
--- no_error_log
[error]



=== TEST 3: dedupe: the owner, its replay, a 422: each call its own server span under its client's span
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_key_prefix "otel3:";
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_OTEL_PORT/v1/traces;
    idem_otel_flush 50ms;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
my $t = IdemOtel::hexid(32);
my @c = map { IdemOtel::hexid(16) } 1 .. 3;
my $id = 'otel-dd-' . IdemOtel::hexid(8);
my @codes = map { (main::call('/pay', $id, main::tp($t, $c[$_]),
                              '--data', $_ == 2 ? 'a=2' : 'a=1'))[0] }
            0 .. 2;
Test::More::is("@codes", '200 200 422', 'owner, replay, 422');
Test::More::is(scalar IdemOtel::wait_spans($t, 4), 4, 'four spans came');
my ($owner) = main::tree_ok($t, $c[0], 1, $id, 'the owner');
Test::More::is($owner->{attributes}{'idem.dedupe'}, 'claimed',
               'the owner claimed the call');
my ($replay) = main::tree_ok($t, $c[1], 0, undef, 'the replay');
Test::More::is("$replay->{attributes}{'idem.dedupe'} "
               . "$replay->{attributes}{'http.response.status_code'}",
               'replayed 200', 'the replay: replayed, 200');
my ($mismatch) = main::tree_ok($t, $c[2], 0, undef, 'the 422');
Test::More::is("$mismatch->{attributes}{'idem.dedupe'} "
               . "$mismatch->{attributes}{'http.response.status_code'} "
               . "$mismatch->{status}", '422 422 0',
               'the 422: said, not an error of the gateway');
main::metric_is('idem_otel_spans_total{result="sent"}', 4);
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="sent"\} 4
--- no_error_log
[error]



=== TEST 4: dedupe: a 409 while the owner runs, a waiter answered by its end
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_key_prefix "otel4:";
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_OTEL_PORT/v1/traces;
    idem_otel_flush 50ms;

    # the default server (curl's Host): the same URI as the block's
    # server's, whose duplicates wait
    server {
        listen $TEST_NGINX_SERVER_PORT;
        server_name wait;
        location /pay {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_dedupe_wait 20s;
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
        }
    }
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
    location /metrics {
        idem_metrics;
    }
--- init
my $t = IdemOtel::hexid(32);
my @c = map { IdemOtel::hexid(16) } 1 .. 3;
my $id = 'otel-w-' . IdemOtel::hexid(8);
IdemBg::bg('owner', $id, '/pay', '-H', 'traceparent: ' . main::tp($t, $c[0]));
IdemWait::owner_in($id);
my ($code) = main::call('/pay', $id, main::tp($t, $c[1]), '-H',
                        'Host: localhost');
Test::More::is($code, 409, 'a duplicate that does not wait: 409');
IdemBg::bg('waiter', $id, '/pay', '-H', 'traceparent: ' . main::tp($t, $c[2]));
IdemWait::parked_ok($id, 1);
IdemWait::release($id);
Test::More::like(IdemBg::done('owner'), qr{^HTTP/1.1 200}, 'the owner: 200');
Test::More::like(IdemBg::done('waiter'), qr{^HTTP/1.1 200}, 'the waiter: 200');
Test::More::is(scalar IdemOtel::wait_spans($t, 4), 4, 'four spans came');
my ($owner) = main::tree_ok($t, $c[0], 1, $id, 'the owner');
my ($conflict) = main::tree_ok($t, $c[1], 0, undef, 'the 409');
Test::More::is("$conflict->{attributes}{'idem.dedupe'} "
               . "$conflict->{attributes}{'http.response.status_code'}",
               '409 409', 'the 409');
my ($waiter) = main::tree_ok($t, $c[2], 0, undef, 'the waiter');
Test::More::is("$waiter->{attributes}{'idem.dedupe'} "
               . ($waiter->{attributes}{'idem.dedupe.waited'} ? 'waited' : '-'),
               'replayed waited', 'the waiter: waited, then replayed');
Test::More::ok($waiter->{end} >= $owner->{end} - 50_000_000,
               'the waiter ended with its owner');
main::metric_is('idem_otel_spans_total{result="sent"}', 4);
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="sent"\} 4
--- no_error_log
[error]



=== TEST 5: gRPC: a Trailers-Only UNAVAILABLE retried: the tree whole, grpc-status on each attempt
--- http_config
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_OTEL_PORT/v1/traces;
    idem_otel_flush 50ms;
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
    location /metrics {
        idem_metrics;
    }
--- init
my ($t, $c) = (IdemOtel::hexid(32), IdemOtel::hexid(16));
my $id = 'otel-grpc-' . IdemOtel::hexid(8);
my ($code) = main::call('/g/svc/Flaky', $id, main::tp($t, $c), '--data', 'x',
                        '-H', 'Content-Type: application/grpc');
Test::More::is($code, 200, 'the gRPC call is answered');
Test::More::is(scalar IdemOtel::wait_spans($t, 3), 3, 'three spans came');
my ($srv, @a) = main::tree_ok($t, $c, 2, $id, 'gRPC');
Test::More::is("$srv->{name} $srv->{attributes}{'idem.state'}",
               'POST / SUCCESS', 'the call: its route, a success');
Test::More::is("$a[0]{attributes}{'rpc.grpc.status_code'} $a[0]{status} "
               . "$a[1]{attributes}{'rpc.grpc.status_code'} $a[1]{status}",
               '14 2 0 0', 'UNAVAILABLE, an error; then OK');
main::metric_is('idem_otel_spans_total{result="sent"}', 3);
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="sent"\} 3
--- no_error_log
[error]



=== TEST 6: the collector down: every call answered at once, every span dropped and counted
--- http_config
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_OTEL_DOWN_PORT/v1/traces;
    idem_otel_flush 20ms;
    idem_otel_batch 2;
--- config
    location /pay {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
my $t = IdemOtel::hexid(32);
my @slow;
for my $i (1 .. 10) {
    my ($code, $secs) = main::call('/pay', "otel-down-$i",
                                   main::tp($t, IdemOtel::hexid(16)));
    push @slow, "$i: $code in $secs s" if $code != 200 || $secs > 2;
}
Test::More::is("@slow", '', 'every call answered 200 at once');
main::metric_is('idem_otel_spans_total{result="dropped"}', 20);
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="sent"\} 0
idem_otel_spans_total\{result="dropped"\} 20
--- error_log
failed (cannot connect)
--- no_error_log
[error]



=== TEST 7: the collector paused (SIGSTOP): calls answered at once, batches time out and are counted
--- http_config
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_OTEL_PORT/v1/traces;
    idem_otel_flush 20ms;
    idem_otel_batch 2;
    idem_otel_timeout 300ms;
--- config
    location /pay {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
IdemOtel::pause();
my $t = IdemOtel::hexid(32);
my @slow;
for my $i (1 .. 10) {
    my ($code, $secs) = main::call('/pay', "otel-paused-$i",
                                   main::tp($t, IdemOtel::hexid(16)));
    push @slow, "$i: $code in $secs s" if $code != 200 || $secs > 2;
}
Test::More::is("@slow", '', 'every call answered 200 at once');
main::metric_is('idem_otel_spans_total{result="dropped"}', 20);
IdemOtel::resume();
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="sent"\} 0
idem_otel_spans_total\{result="dropped"\} 20
--- error_log
failed (timed out)
--- no_error_log
[error]



=== TEST 8: a slow collector: calls answered at once; batches out past the timeout dropped, the next ones sent once it is quick again
--- http_config
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_OTEL_PORT/v1/traces;
    idem_otel_flush 20ms;
    idem_otel_batch 2;
    idem_otel_timeout 300ms;
--- config
    location /pay {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
IdemOtel::delay(1);
my $t = IdemOtel::hexid(32);
my @slow;
for my $i (1 .. 10) {
    my ($code, $secs) = main::call('/pay', "otel-slow-$i",
                                   main::tp($t, IdemOtel::hexid(16)));
    push @slow, "$i: $code in $secs s" if $code != 200 || $secs > 2;
}
Test::More::is("@slow", '', 'every call answered 200 at once');
main::metric_is('idem_otel_spans_total{result="dropped"}', 20);
IdemOtel::delay(0);
my $t2 = IdemOtel::hexid(32);
main::call('/pay', 'otel-quick', main::tp($t2, IdemOtel::hexid(16)));
Test::More::is(scalar IdemOtel::wait_spans($t2, 2), 2,
               'quick again: the next call\'s spans arrive');
main::metric_is('idem_otel_spans_total{result="sent"}', 2);
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="sent"\} 2
idem_otel_spans_total\{result="dropped"\} 20
--- error_log
failed (timed out)
--- no_error_log
[error]



=== TEST 9: a collector that answers 503: each batch dropped and counted, its status line in a warning
--- http_config
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_RAND_PORT_1/v1/traces;
    idem_otel_flush 20ms;
    idem_otel_batch 2;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        location / {
            return 503;
        }
    }
--- config
    location /pay {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
my $t = IdemOtel::hexid(32);
main::call('/pay', "otel-503-$_", main::tp($t, IdemOtel::hexid(16))) for 1 .. 3;
main::metric_is('idem_otel_spans_total{result="dropped"}', 6);
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="sent"\} 0
idem_otel_spans_total\{result="dropped"\} 6
--- error_log
answered "HTTP/1.1 503 Service Temporarily Unavailable": 2 spans dropped
--- no_error_log
[error]



=== TEST 10: the queue is bounded: spans past idem_otel_buffer dropped and counted, nothing sent before its time
--- http_config
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_OTEL_PORT/v1/traces;
    idem_otel_buffer 16k;
    idem_otel_batch 100000;
    idem_otel_flush 1h;
--- config
    location /pay {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
my $t = IdemOtel::hexid(32);
my $n = 0;
IdemWait::wait_for('a call\'s spans dropped', sub {
    main::call('/pay', 'otel-full-' . ++$n, main::tp($t, IdemOtel::hexid(16)));
    (IdemWait::metric('idem_otel_spans_total{result="dropped"}') // 0) > 0;
});
Test::More::ok($n > 3 && $n < 20, "the queue held a few calls ($n)");
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="sent"\} 0
idem_otel_spans_total\{result="dropped"\} 2
--- no_error_log
[error]



=== TEST 11: a reload while calls run: the old worker sends what it queued as it exits, all counted sent
--- http_config
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_OTEL_PORT/v1/traces;
    idem_otel_batch 100000;
    idem_otel_flush 1h;
--- config
    location /pay {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
    location /metrics {
        idem_metrics;
    }
--- init
my $t = IdemOtel::hexid(32);
my $tag = IdemOtel::hexid(6);
# the calls are held at the backend until the reload is under way
for my $i (1 .. 20) {
    IdemBg::bg("r$i", "otel-reload-$tag-$i", '/pay', '-H',
               'traceparent: ' . main::tp($t, IdemOtel::hexid(16)));
}
Test::More::ok(IdemWait::wait_for('the 20 calls at the backend', sub {
    !grep { IdemWait::backend_runs("otel-reload-$tag-$_") < 1 } 1 .. 20 }),
    'the 20 calls are running');
my $pid = do { local (@ARGV, $/) = (IdemPaths::servroot() . '/logs/nginx.pid'); <> };
chomp $pid;
kill 'HUP', $pid;
Test::More::ok(IdemWait::wait_for('the reload under way',
                   sub { IdemWait::log_count(qr/reconfiguring/) >= 1 }),
               'nginx reconfigures while the calls are held');
IdemWait::release("otel-reload-$tag-$_") for 1 .. 20;
my @bad = grep { IdemBg::done("r$_") !~ m{^HTTP/1.1 200} } 1 .. 20;
Test::More::is("@bad", '', 'the 20 calls answered 200 across the reload');
Test::More::is(scalar IdemOtel::wait_spans($t, 40), 40,
               'their 40 spans came, the flush an hour away');
main::metric_is('idem_otel_spans_total{result="sent"}', 40);
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="sent"\} 40
idem_otel_spans_total\{result="dropped"\} 0
--- no_error_log
[error]


=== TEST 12: the collector's answer: chunked, a chunk's data ending as the last chunk does, read in two parts: the body ends at the real last chunk, the connection kept
--- http_config
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_OTEL_RAW_PORT/v1/traces;
    idem_otel_flush 20ms;
    idem_otel_batch 2;
--- config
    location /pay {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
main::raw_ok("chunked, in two parts", 1,
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nx0\r\n\r\n",
    "0\r\n\r\n");
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="dropped"\} 0
--- no_error_log
[error]



=== TEST 13: the collector's answer (the nginx of TEST 12): chunked listed after another coding counts as chunked: read to its last chunk, the connection kept
--- init
main::raw_ok("gzip, chunked", 1,
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="dropped"\} 0
--- no_error_log
[error]



=== TEST 14: the collector's answer (the same nginx): a 204 with bytes after it: the batch is in, the connection not kept
--- init
main::raw_ok("204 and more", 0,
    "HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\n\r\n");
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="dropped"\} 0
--- no_error_log
[error]



=== TEST 15: the collector's answer (the same nginx): two Content-Length headers that differ: no end known, the batch is in, the connection not kept
--- init
main::raw_ok("two lengths", 0,
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}");
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="dropped"\} 0
--- no_error_log
[error]



=== TEST 16: the collector's answer (the same nginx): Connection: close, then a second Connection header without it: the connection not kept
--- init
main::raw_ok("a second Connection", 0,
    "HTTP/1.1 200 OK\r\nConnection: close\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}");
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="dropped"\} 0
--- no_error_log
[error]



=== TEST 16b: the collector's answer (the same nginx): a second Content-Length that is empty, its line ended by a bare LF: invalid, no end known, the batch is in, the connection not kept
--- init
main::raw_ok("an empty Content-Length", 0,
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length:\n\r\n{}");
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="dropped"\} 0
--- no_error_log
[error]



=== TEST 16c: the collector's answer (the same nginx): every line ended by a bare LF (RFC 9112 2.2: a recipient may take it): read as lines, the body's end known, the connection kept
--- init
main::raw_ok("bare LF", 1,
    "HTTP/1.1 200 OK\nContent-Length: 2\n\n{}");
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="dropped"\} 0
--- no_error_log
[error]



=== TEST 17: bytes that are not UTF-8 in the path (%FF; an overlong, a surrogate, a cut sequence) and in the Host (0xE9): each replaced by U+FFFD, and the batch of 8 spans accepted whole; UTF-8 passes as sent, control bytes, quote and backslash escaped
--- http_config
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_OTEL_PORT/v1/traces;
    idem_otel_batch 8;
    idem_otel_flush 1h;
--- config
    location /o/ {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /metrics {
        idem_metrics;
    }
--- init
my $t = IdemOtel::hexid(32);
my %path = (
    'otel-utf8-ff'   => ['/o/%FF', "/o/\x{fffd}"],
    'otel-utf8-bad'  => ['/o/%C0%AF%ED%A0%80%E2%82x',
                         '/o/' . ("\x{fffd}" x 6) . 'x'],
    'otel-utf8-good' => ['/o/%C3%A9%E2%82%AC%F0%9F%98%80',
                         "/o/\x{e9}\x{20ac}\x{1f600}"],
    'otel-utf8-ctl'  => ['/o/%01%1F%7F%22%5C', "/o/\x01\x1f\x7f\"\\"],
);
# nginx 1.22 to 1.28 let a Host with a byte over 0x7f through; later ones
# answer 400 before any module sees it: there the call goes without it
my $raw_host = 1;
for my $id (sort keys %path) {
    my @host = $id eq 'otel-utf8-good' ? ('-H', "Host: gw\xe9") : ();
    my ($code) = main::call($path{$id}[0], $id,
                            main::tp($t, IdemOtel::hexid(16)), @host);
    if (@host && $code eq '400') {
        $raw_host = 0;
        main::call($path{$id}[0], $id, main::tp($t, IdemOtel::hexid(16)));
    }
}
# the four calls' 8 spans: one batch, sent when the eighth is queued
Test::More::is(scalar IdemOtel::wait_spans($t, 8), 8,
               'the batch of 8 spans came');
Test::More::is(IdemOtel::errors(), '', 'the collector parsed it (strict UTF-8)');
my %srv = map { $_->{attributes}{'idem.call_id'} => $_ }
          grep { $_->{kind} == 2 } IdemOtel::spans($t);
for my $id (sort keys %path) {
    Test::More::is($srv{$id} && $srv{$id}{attributes}{'url.path'},
                   $path{$id}[1], "$id: url.path");
}
Test::More::is($srv{'otel-utf8-good'}
               && $srv{'otel-utf8-good'}{attributes}{'server.address'},
               $raw_host ? "gw\x{fffd}" : '127.0.0.1',
               $raw_host ? 'a Host with 0xE9: server.address'
                         : 'this nginx refuses a Host with 0xE9 itself');
Test::More::is($srv{'otel-utf8-ff'}
               && $srv{'otel-utf8-ff'}{attributes}{'server.address'},
               '127.0.0.1', 'another Host, as sent');
main::metric_is('idem_otel_spans_total{result="sent"}', 8);
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="sent"\} 8
idem_otel_spans_total\{result="dropped"\} 0
--- no_error_log
[error]



=== TEST 18: an X-Trace-Id of 32 zeros is no W3C trace id: no span exported for it (a sampled route, a sampled traceparent of another trace beside it), and no traceparent upstream; no span with an all-zero trace or span id
--- http_config
    idem_otel_endpoint http://127.0.0.1:$TEST_NGINX_OTEL_PORT/v1/traces;
    idem_otel_flush 50ms;
--- config
    location /pay {
        idem on;
        idem_otel_sample 1;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
my $z = '0' x 32;
my $t = IdemOtel::hexid(32);
my $before = () = IdemOtel::spans();
main::call('/pay', 'otel-zero', undef, '-H', "X-Trace-Id: $z");
main::call('/pay', 'otel-zero-tp', main::tp(IdemOtel::hexid(32),
                                            IdemOtel::hexid(16)),
           '-H', "X-Trace-Id: $z");
main::call('/pay', 'otel-after-zero', undef, '-H', "X-Trace-Id: $t");
Test::More::is(scalar IdemOtel::wait_spans($t, 2), 2,
               'the W3C trace id\'s two spans came');
main::metric_is('idem_otel_spans_total{result="sent"}', 2);
Test::More::is(scalar(() = IdemOtel::spans()) - $before, 2,
               'and no other span');
Test::More::is(scalar(grep { $_->{traceId} !~ /[^0]/
                             || $_->{spanId} !~ /[^0]/ } IdemOtel::spans()),
               0, 'no span has an all-zero trace id or span id');
for my $id ('otel-zero', 'otel-zero-tp') {
    Test::More::like(IdemWait::get($ENV{TEST_NGINX_BACKEND_PORT}, "/log/$id"),
                     qr/^n=1 attempt=1 \S+ tp=- /, "$id: no traceparent upstream");
}
Test::More::is(IdemOtel::errors(), '', 'every request parsed');
--- request
GET /metrics
--- response_body_like
idem_otel_spans_total\{result="sent"\} 2
--- no_error_log
[error]
