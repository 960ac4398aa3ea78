# Group commit of durable claims (issue 36, part 1): the durable claims of
# one connection share WAITs.  Each kind of durable claim (replicas,
# timeout) has connections of its own (issue 45, point 4): a WAIT
# holds up only the claims of its kind.  Two of them, taking turns (issue
# 46): a claim made while a WAIT blocks one goes on the other at once,
# with a WAIT of its own.  A master on TEST_NGINX_REDIS_PORT + 460 and
# a replica on + 461, started here; the replica is stopped (SIGSTOP) to
# hold a WAIT in flight, or to answer one short, and resumed (SIGCONT).
#
# The claims sent while a WAIT blocks each of the kind's connections go
# behind the WAIT that left first, run in Redis once it returns, and
# their replies come back together: they share the next WAIT there (its
# debug line: "WAIT <n> <ms> on ... for <k> claims, connection #<t>").
# The blocks wait for those lines, for the claims' own lines ("claim of
# ... sent") and for the answers, never a fixed time.
#
#   a claim made while a WAIT is in flight has its own WAIT, sent before
#     the first returns, on the other connection; a batch answered in
#     full: every claim forwarded, once
#   a batch answered short: every claim 503 claim-not-durable, nothing
#     forwarded, each released (the same ids run once afterwards)
#   replicas=1 and replicas=2, one replica: each kind its own WAIT; the
#     claim for 1 runs while the WAIT for 2 is in flight, the claim for 2
#     is refused
#   a claim sent while both connections of its kind have a WAIT in
#     flight waits for the next WAIT of the first: the first two are
#     answered short, the third, after the replica is back, in full
#   a short claim's own WAIT answers it while a long WAIT of another kind
#     is in flight; ten claims of each of two kinds at once: each kind
#     answered by its own replicas and timeout
#   the connections lost under their batches' WAITs: 503 to their claims,
#     released
#   clients that leave while their claims wait for a WAIT (HTTP/1.1, and
#     HTTP/2 connections closed): no crash, each call once (the call runs
#     on, as a dedupe owner's does when its client goes)
#   a claim sent before a WAIT and answered while it is in flight (the
#     master behind t/lib/RedisHoldProxy.pm, which holds its reply until
#     the WAIT has left) is answered by that WAIT, not the next one

use Test::Nginx::Socket 'no_plan';

BEGIN {
    if ($ENV{TEST_NGINX_USE_VALGRIND}) {
        require Test::More;
        Test::More::plan(skip_all => 'background requests across blocks, '
                                     . 'timed: not under valgrind');
    }
}

use lib 't/lib';
use IdemRecord;
use RedisSentinel ();
use IdemBg qw(bg done);
use IdemPaths qw(h2_url);
use IdemWait ();
use RedisHoldProxy ();

our ($Master, $Replica, $Proxy, $ProxyPid, $Hold);

BEGIN {
    $Master = ($ENV{TEST_NGINX_REDIS_PORT} || 16379) + 460;
    $Replica = $Master + 1;
    $Proxy = $Master + 2;
    $ENV{TEST_NGINX_BATCH_MASTER} = $Master;
    $ENV{TEST_NGINX_HOLD_PROXY} = $Proxy;
}

sub signal {
    my ($port, $sig) = @_;
    my $pid = RedisSentinel::pid($port) or return;
    kill $sig, $pid;
}

# a clean master, and a replica up and acknowledging its writes
sub fresh {
    signal($Replica, 'CONT');
    RedisSentinel::cli($Master, 'flushall');
    RedisSentinel::start_redis($Replica, $Master)
        unless RedisSentinel::pid($Replica);
    RedisSentinel::wait_until(20, sub {
        RedisSentinel::replicated($Master)
    }) or die "the replica on $Replica does not acknowledge\n";
}

# waits for $n lines of the server's error log matching $re (log_count
# reads the log into $_: not the caller's loop variable)
sub seen {
    my ($what, $re, $n) = @_;
    local $_;
    Test::More::ok(IdemWait::wait_for($what,
                       sub { IdemWait::log_count($re) >= ($n // 1) }),
                   $what);
}

# a WAIT sent; $t: on the kind's connection #$t (0 or 1) only
sub wait_line {
    my ($n, $ms, $k, $t) = @_;
    my $on = defined $t ? ", connection #$t" : '';
    return qr/idem redis: WAIT $n $ms on "[^"]*" for $k claims\Q$on\E/;
}

# a claim for /w or /m sent while the first claim's WAIT is in flight:
# it has a WAIT of its own on the other connection, sent at once
sub second {
    my ($ms, $id, $path) = @_;
    send_claims([$path, '--data', 'x=1'], $id);
    seen("$id has a WAIT of its own", wait_line(1, $ms, 1, 1));
}

sub claim_sent {
    my ($id) = @_;
    return qr/idem store: claim of "idem:c:\{\Q$id\E\}" sent/;
}

sub runs { IdemWait::backend_runs($_[0]) }

# the record of $id holds a released claim ("k:<token>" F) of its owner
sub released {
    my ($id) = @_;
    my %h = IdemRecord::fields($Master, "idem:c:{$id}");
    return scalar grep { /^k:[0-9a-f]{16}$/ && $h{$_} eq 'F' } keys %h;
}

sub status { $_[0] =~ m{^HTTP/1\.1 (\d+)} ? $1 : 0 }

sub problem { $_[0] =~ /"type":"urn:ngx-idem:problem:([a-z-]+)"/ ? $1 : '' }

# the replica stopped, a first claim (IdemBg::bg's arguments) whose WAIT
# ($ms) then holds the durable claims' connection
sub hold_first {
    my ($ms, @bg) = @_;
    fresh();
    signal($Replica, 'STOP');
    bg(@bg);
    seen('the first claim waits', wait_line(1, $ms, 1));
}

# more claims, each its own call id, sent behind it (@$args: bg's after
# the id)
sub send_claims {
    my ($args, @ids) = @_;
    bg($_, $_, @$args) for @ids;
    seen("claim $_ sent", claim_sent($_)) for @ids;
}

# $r, the answer to $id: 503 claim-not-durable, not forwarded, released
sub refused {
    my ($id, $r) = @_;
    Test::More::is(status($r), 503, "$id refused");
    Test::More::is(problem($r), 'claim-not-durable', "$id: claim-not-durable");
    Test::More::is(runs($id), 0, "$id not forwarded");
    Test::More::ok(IdemWait::wait_for("$id released", sub { released($id) }),
                   "$id released");
}

# with the replica back, each of the refused ids sent again runs once
sub once_again {
    my ($path, @ids) = @_;
    fresh();
    for my $id (@ids) {
        bg("$id-again", $id, $path, '--data', 'x=1');
        Test::More::is(status(done("$id-again")), 200,
                       "$id sent again: forwarded");
        Test::More::is(runs($id), 1, "$id ran once");
    }
}

# a call whose client left: it ran, and its answer is stored
sub ran_stored {
    my ($id) = @_;
    Test::More::ok(IdemWait::wait_for("$id ran", sub { runs($id) >= 1 }),
                   "$id ran");
    Test::More::ok(IdemWait::wait_for("the answer of $id stored",
        sub { my %h = IdemRecord::fields($Master, "idem:c:{$id}");
              defined $h{r} }),
                   "the answer of $id stored");
}

END {
    local $?;
    IdemBg::stop_all();
    RedisHoldProxy::stop($ProxyPid);
    signal($Replica, 'CONT');
    RedisSentinel::kill_node($_, 'KILL') for $Replica, $Master;
}

RedisSentinel::kill_node($_, 'KILL') for $Replica, $Master;
RedisSentinel::start_redis($Master);

# the master behind a proxy that can hold a reply back (TEST 10)
$Hold = IdemPaths::scratch() . '/hold';
$ProxyPid = RedisHoldProxy::start($Proxy, $Master, $Hold);

our $Config = <<'CONF';
    location /w {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_durable replicas=1 timeout=10s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /s {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_durable replicas=1 timeout=2s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /short {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_durable replicas=1 timeout=100ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /two {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_durable replicas=2 timeout=3s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /m {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_durable replicas=1 timeout=4s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /one {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_durable replicas=1 timeout=1s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
CONF

add_block_preprocessor(sub {
    my $block = shift;
    if (!defined $block->config) {
        $block->set_value('config', $main::Config);
    }
    if (!defined $block->http_config) {
        $block->set_value('http_config', '    idem_redis '
            . '127.0.0.1:$TEST_NGINX_BATCH_MASTER timeout=1s;');
    }
});

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: a claim made while a WAIT of its kind is in flight runs on the other connection, whose WAIT leaves before the first returns; two claims made while both WAIT share the next WAIT of the first; the replica back, each forwarded once
--- init
main::hold_first(10000, 'b1-0', 'b1-0', '/w', '--data', 'x=1');
main::second(10000, 'b1-1', '/w');
Test::More::is(IdemWait::log_count(qr/idem redis: WAIT on "[^"]*": /), 0,
               '... while the first WAIT is in flight');
main::send_claims(['/w', '--data', 'x=1'], map { "b1-$_" } 2 .. 3);
main::signal($main::Replica, 'CONT');
for my $i (0 .. 3) {
    my $r = main::done("b1-$i");
    Test::More::is(main::status($r), 200, "b1-$i forwarded");
    Test::More::is(main::runs("b1-$i"), 1, "b1-$i ran once");
}
Test::More::is(IdemWait::log_count(main::wait_line(1, 10000, 2, 0)), 1,
               'one WAIT for the two later claims, behind the first');
Test::More::is(IdemWait::log_count(qr/idem redis: WAIT \d+ \d+ on /), 3,
               'three WAITs for four claims');
--- request
GET /log/b1-2
--- response_body_like eval
'\An=1 [^\n]*\n\z'
--- no_error_log
[error]



=== TEST 2: a batch answered short: every claim 503 claim-not-durable, nothing forwarded, each released; the same ids run once with the replica back
--- init
main::hold_first(4000, 'b2-0', 'b2-0', '/m', '--data', 'x=1');
main::second(4000, 'b2-1', '/m');
main::send_claims(['/m', '--data', 'x=1'], map { "b2-$_" } 2 .. 3);
main::refused("b2-$_", main::done("b2-$_")) for 0 .. 3;
Test::More::is(IdemWait::log_count(main::wait_line(1, 4000, 2)), 1,
               'the two later claims shared one WAIT');
main::seen('that WAIT was answered short',
           qr/idem redis: WAIT on "[^"]*": 0 replicas, for 2 claims/);
main::once_again('/m', map { "b2-$_" } 0 .. 3);
--- request
GET /log/b2-3
--- response_body_like eval
'\An=1 [^\n]*\n\z'
--- no_error_log
[error]



=== TEST 3: replicas=1 and replicas=2, one replica: each kind has its connection and its WAIT (WAIT 2 3000, WAIT 1 1000): the claim for 1 runs while the WAIT for 2 is in flight; the claim for 2 is refused and released
--- init
main::fresh();
main::bg('b3-two', 'b3-two', '/two', '--data', 'x=1');
main::seen('the claim for 2 waits', main::wait_line(2, 3000, 1));
main::bg('b3-one', 'b3-one', '/one', '--data', 'x=1');
Test::More::is(main::status(main::done('b3-one')), 200,
               'replicas=1: forwarded');
Test::More::ok(IdemBg::running('b3-two'),
               '... while the WAIT for 2 was in flight');
Test::More::is(main::runs('b3-one'), 1, 'replicas=1: ran once');
main::refused('b3-two', main::done('b3-two'));
Test::More::is(IdemWait::log_count(main::wait_line(1, 1000, 1)), 1,
               'one WAIT 1 for the claim for 1');
main::seen('the WAIT 2 answered with the one replica',
           qr/idem redis: WAIT on "[^"]*": 1 replicas, for 1 claims/, 2);
--- request
GET /log/b3-one
--- response_body_like eval
'\An=1 [^\n]*\n\z'
--- no_error_log
[error]



=== TEST 4: a claim sent while both connections of its kind WAIT waits behind the first WAIT and for the next one there: the first two WAITs answered short (claims refused), the next in full once the replica is back (it runs)
--- init
main::hold_first(4000, 'b4-a', 'b4-a', '/m', '--data', 'x=1');
main::second(4000, 'b4-b', '/m');
main::send_claims(['/m', '--data', 'x=1'], 'b4-c');
Test::More::is(IdemWait::log_count(
                   qr/idem redis: WAIT on "[^"]*": 0 replicas, for 1 claims/),
               0, 'sent while both WAITs were in flight');
for my $id ('b4-a', 'b4-b') {
    my $r = main::done($id);
    Test::More::is(main::status($r), 503, "$id: its WAIT was answered short");
    Test::More::is(main::problem($r), 'claim-not-durable', 'claim-not-durable');
}
main::seen('the third claim waits for the next WAIT of the first connection',
           main::wait_line(1, 4000, 1, 0), 2);
main::signal($main::Replica, 'CONT');
my $c = main::done('b4-c');
Test::More::is(main::status($c), 200,
               'the third claim is answered by the next WAIT: forwarded');
Test::More::is(main::runs('b4-a'), 0, 'the first not forwarded');
Test::More::is(main::runs('b4-b'), 0, 'the second not forwarded');
Test::More::is(main::runs('b4-c'), 1, 'the third ran once');
--- request
GET /log/b4-c
--- response_body_like eval
'\An=1 [^\n]*\n\z'
--- no_error_log
[error]



=== TEST 5: a claim for 1 replica within 100 ms is answered by its own WAIT (short: refused, released) while a WAIT for 10 s of another kind is in flight; that one's claim runs when the replica is back
--- init
main::hold_first(10000, 'b5-long', 'b5-long', '/w', '--data', 'x=1');
main::bg('b5-short', 'b5-short', '/short', '--data', 'x=1');
main::refused('b5-short', main::done('b5-short'));
Test::More::is(IdemWait::log_count(main::wait_line(1, 100, 1)), 1,
               'the short claim had its own WAIT');
Test::More::is(IdemWait::log_count(
                   qr/idem redis: WAIT on "[^"]*": 0 replicas, for 1 claims/),
               1, '... answered short');
Test::More::ok(IdemBg::running('b5-long'),
               '... while the long WAIT was in flight');
main::signal($main::Replica, 'CONT');
Test::More::is(main::status(main::done('b5-long')), 200,
               'the long claim forwarded');
Test::More::is(main::runs('b5-long'), 1, 'the long claim ran once');
--- request
GET /log/b5-long
--- response_body_like eval
'\An=1 [^\n]*\n\z'
--- no_error_log
[error]



=== TEST 6: the durable claims' connections lost under their WAITs (logged as an error): their two claims 503 claim-not-durable, released; sent again, each runs once, also before the connections are made again (held: issue 45)
--- init
main::hold_first(4000, 'b6-0', 'b6-0', '/m', '--data', 'x=1');
main::second(4000, 'b6-1', '/m');
# the connections blocked in WAIT: only they go
my @ids = RedisSentinel::cli($main::Master, 'client', 'list')
          =~ /^id=(\d+) [^\n]*cmd=wait/mg;
Test::More::is(scalar @ids, 2, 'the WAITs\' connections found');
RedisSentinel::cli($main::Master, 'client', 'kill', 'id', $_) for @ids;
main::refused("b6-$_", main::done("b6-$_")) for 0, 1;
main::once_again('/w', 'b6-0', 'b6-1');
--- request
GET /log/b6-1
--- response_body_like eval
'\An=1 [^\n]*\n\z'
--- error_log
connection lost
--- no_error_log
[alert]
[crit]
dropped (not connected)



=== TEST 7: clients that leave while their claims wait in a batch (one in the WAIT in flight, two for the next): no crash, each call runs once, the resends get its answer
--- init
main::hold_first(10000, 'b7-0', 'b7-0', '--max-time', '1', '/w',
                 '--data', 'x=1');
main::send_claims(['--max-time', '1', '/w', '--data', 'x=1'], 'b7-1', 'b7-2');
Test::More::is(main::done("b7-$_"), '', "b7-$_: the client gave up")
    for 0 .. 2;
main::signal($main::Replica, 'CONT');
main::ran_stored("b7-$_") for 0 .. 2;
--- request eval
["POST /w\nx=1", "POST /w\nx=1", "POST /w\nx=1", "GET /log/b7-0",
 "GET /log/b7-1", "GET /log/b7-2"]
--- more_headers eval
["X-Call-Id: b7-0", "X-Call-Id: b7-1", "X-Call-Id: b7-2", "", "", ""]
--- response_headers eval
["Idempotent-Replayed: true", "Idempotent-Replayed: true",
 "Idempotent-Replayed: true", "", "", ""]
--- response_body_like eval
['\An=1 ', '\An=1 ', '\An=1 ', '\An=1 [^\n]*\n\z', '\An=1 [^\n]*\n\z',
 '\An=1 [^\n]*\n\z']
--- no_error_log
[error]
[alert]



=== TEST 8: HTTP/2 clients that close their connections while their claims wait in a batch: no crash, each call once, the resends get its answer
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_BATCH_MASTER timeout=1s;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location /w {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_dedupe_durable replicas=1 timeout=10s;
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
        }
    }
--- init
my @h2 = ('--http2-prior-knowledge', '--max-time', '1', '--data', 'x=1',
          main::h2_url('/w'));
main::hold_first(10000, 'b8-0', 'b8-0', @h2);
main::send_claims(\@h2, 'b8-1', 'b8-2');
Test::More::is(main::done("b8-$_"), '', "b8-$_: the client gave up")
    for 0 .. 2;
main::signal($main::Replica, 'CONT');
main::ran_stored("b8-$_") for 0 .. 2;
--- request eval
["POST /w\nx=1", "POST /w\nx=1", "POST /w\nx=1", "GET /log/b8-0",
 "GET /log/b8-1", "GET /log/b8-2"]
--- more_headers eval
["X-Call-Id: b8-0", "X-Call-Id: b8-1", "X-Call-Id: b8-2", "", "", ""]
--- response_headers eval
["Idempotent-Replayed: true", "Idempotent-Replayed: true",
 "Idempotent-Replayed: true", "", "", ""]
--- response_body_like eval
['\An=1 ', '\An=1 ', '\An=1 ', '\An=1 [^\n]*\n\z', '\An=1 [^\n]*\n\z',
 '\An=1 [^\n]*\n\z']
--- no_error_log
[error]
[alert]



=== TEST 9: two routes, one replica: ten claims for replicas=1 timeout=500ms and ten for replicas=2 timeout=3s at once; each route's claims have their own connection and WAIT: every replicas=1 claim runs once, every replicas=2 claim 503 claim-not-durable, not forwarded, released
--- config
    location /d1 {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_durable replicas=1 timeout=500ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /d2 {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_durable replicas=2 timeout=3s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
main::fresh();
for my $i (1 .. 10) {
    main::bg("c1-$i", "c1-$i", '/d1', '--data', 'x=1');
    main::bg("c2-$i", "c2-$i", '/d2', '--data', 'x=1');
}
for my $i (1 .. 10) {
    my $r = main::done("c1-$i");
    Test::More::is(main::status($r), 200, "c1-$i (replicas=1) forwarded");
    Test::More::is(main::runs("c1-$i"), 1, "c1-$i ran once");
}
main::refused("c2-$_", main::done("c2-$_")) for 1 .. 10;
Test::More::is(IdemWait::log_count(qr/idem redis: WAIT 2 500 on /), 0,
               'no WAIT mixes the two routes\' needs');
--- request
GET /log/c1-10
--- response_body_like eval
'\An=1 [^\n]*\n\z'
--- no_error_log
[error]



=== TEST 10: a claim sent before its connection's WAIT and answered while that WAIT is in flight (the proxy holds its reply until the WAIT left) is answered by that WAIT, which counts its write: one WAIT for both claims, each forwarded once
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_HOLD_PROXY timeout=1s;
--- config
    location /p {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_durable replicas=1 timeout=10s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
main::fresh();
# a first call: its WAIT shows the proxy which connection is the durable one
main::bg('b10-0', 'b10-0', '/p', '--data', 'x=1');
Test::More::is(main::status(main::done('b10-0')), 200, 'b10-0 forwarded');
RedisHoldProxy::arm($main::Hold, '{b10-1}', '{b10-2}');
main::send_claims(['/p', '--data', 'x=1'], $_) for 'b10-1', 'b10-2';
for my $id ('b10-1', 'b10-2') {
    Test::More::is(main::status(main::done($id)), 200, "$id forwarded");
    Test::More::is(main::runs($id), 1, "$id ran once");
}
Test::More::ok(!-e $main::Hold, 'the proxy held a reply until the WAIT');
Test::More::is(IdemWait::log_count(qr/idem redis: WAIT 1 10000 on /), 2,
               'two WAITs for three claims');
Test::More::is(IdemWait::log_count(
                   qr/idem redis: WAIT on "[^"]*": 1 replicas, for 2 claims/),
               1, 'the second WAIT answered both later claims');
--- request
GET /log/b10-2
--- response_body_like eval
'\An=1 [^\n]*\n\z'
--- no_error_log
[error]
