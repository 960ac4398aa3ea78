# Group commit of durable claims (issue 36, part 1): the durable claims of
# one connection share WAITs.  Each kind of durable claim (replicas,
# timeout) has its connection of its own (issue 45, point 4): a WAIT
# holds up only the claims of its kind.  A master on TEST_NGINX_REDIS_PORT + 460 and
# a replica on + 461, started here; the replica is stopped (SIGSTOP) to
# hold a WAIT in flight, or to answer one short, and resumed (SIGCONT).
#
# The claims sent while a WAIT blocks the durable claims' connection run
# in Redis once it returns, and their replies come back together: they
# share the next WAIT (its debug line: "WAIT <n> <ms> on ... for <k>
# claims").  The blocks wait for those lines, for the claims' own lines
# ("claim of ... sent") and for the answers, never a fixed time.
#
#   a batch answered in full: every claim forwarded, once
#   a batch answered short: every claim 503 claim-not-durable, nothing
#     forwarded, each released (the same ids run once afterwards)
#   replicas=1 and replicas=2, one replica: each kind its own WAIT; the
#     claim for 1 runs while the WAIT for 2 is in flight, the claim for 2
#     is refused
#   a claim sent while a WAIT of its kind is in flight waits for the next
#     WAIT: the first is answered short, the second, after the replica is
#     back, in full
#   a short claim's own WAIT answers it while a long WAIT of another kind
#     is in flight; ten claims of each of two kinds at once: each kind
#     answered by its own replicas and timeout
#   the connection lost under a batch's WAIT: 503 to its claims, released
#   clients that leave while their claims wait for a WAIT (HTTP/1.1, and
#     HTTP/2 connections closed): no crash, each call once (the call runs
#     on, as a dedupe owner's does when its client goes)

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

our ($Master, $Replica);

BEGIN {
    $Master = ($ENV{TEST_NGINX_REDIS_PORT} || 16379) + 460;
    $Replica = $Master + 1;
    $ENV{TEST_NGINX_BATCH_MASTER} = $Master;
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

sub wait_line {
    my ($n, $ms, $k) = @_;
    return qr/idem redis: WAIT $n $ms on "[^"]*" for $k claims/;
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
    signal($Replica, 'CONT');
    RedisSentinel::kill_node($_, 'KILL') for $Replica, $Master;
}

RedisSentinel::kill_node($_, 'KILL') for $Replica, $Master;
RedisSentinel::start_redis($Master);

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

=== TEST 1: a batch answered in full: the three claims made while a WAIT was in flight share the next one, each call forwarded once
--- init
main::hold_first(10000, 'b1-0', 'b1-0', '/w', '--data', 'x=1');
main::send_claims(['/w', '--data', 'x=1'], map { "b1-$_" } 1 .. 3);
main::signal($main::Replica, 'CONT');
for my $i (0 .. 3) {
    my $r = main::done("b1-$i");
    Test::More::is(main::status($r), 200, "b1-$i forwarded");
    Test::More::is(main::runs("b1-$i"), 1, "b1-$i ran once");
}
Test::More::is(IdemWait::log_count(main::wait_line(1, 10000, 3)), 1,
               'one WAIT for the three claims');
Test::More::is(IdemWait::log_count(qr/idem redis: WAIT \d+ \d+ on /), 2,
               'two WAITs for four claims');
--- request
GET /log/b1-2
--- response_body_like eval
'\An=1 [^\n]*\n\z'
--- no_error_log
[error]



=== TEST 2: a batch answered short: every claim 503 claim-not-durable, nothing forwarded, each released; the same ids run once with the replica back
--- init
main::hold_first(2000, 'b2-0', 'b2-0', '/s', '--data', 'x=1');
main::send_claims(['/s', '--data', 'x=1'], map { "b2-$_" } 1 .. 3);
main::refused("b2-$_", main::done("b2-$_")) for 0 .. 3;
Test::More::is(IdemWait::log_count(main::wait_line(1, 2000, 3)), 1,
               'the three later claims shared one WAIT');
main::seen('that WAIT was answered short',
           qr/idem redis: WAIT on "[^"]*": 0 replicas, for 3 claims/);
main::once_again('/s', map { "b2-$_" } 0 .. 3);
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



=== TEST 4: a claim sent while a WAIT of its kind is in flight waits for the next WAIT: that WAIT is answered short (its claim refused), the next one in full once the replica is back (its claim runs)
--- init
main::hold_first(4000, 'b4-a', 'b4-a', '/m', '--data', 'x=1');
main::send_claims(['/m', '--data', 'x=1'], 'b4-b');
Test::More::is(IdemWait::log_count(
                   qr/idem redis: WAIT on "[^"]*": 0 replicas, for 1 claims/),
               0, 'sent while the first WAIT was in flight');
my $a = main::done('b4-a');
Test::More::is(main::status($a), 503, 'the first WAIT was answered short');
Test::More::is(main::problem($a), 'claim-not-durable', 'claim-not-durable');
main::seen('the second claim waits for the next WAIT',
           main::wait_line(1, 4000, 1), 2);
main::signal($main::Replica, 'CONT');
my $b = main::done('b4-b');
Test::More::is(main::status($b), 200,
               'the second claim is answered by the next WAIT: forwarded');
Test::More::is(main::runs('b4-a'), 0, 'the first not forwarded');
Test::More::is(main::runs('b4-b'), 1, 'the second ran once');
--- request
GET /log/b4-b
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



=== TEST 6: the durable claims' connection lost under a batch's WAIT (its loss logged as an error): its two claims 503 claim-not-durable, released; sent again, each runs once, also when they come before the connection is made again (held for it, never dropped as not connected: issue 45)
--- init
main::hold_first(4000, 'b6-0', 'b6-0', '/m', '--data', 'x=1');
main::send_claims(['/m', '--data', 'x=1'], 'b6-1', 'b6-2');
Test::More::is(main::status(main::done('b6-0')), 503, 'the first refused');
main::seen('both in the next WAIT', main::wait_line(1, 4000, 2));
# the connection blocked in WAIT: only it goes
my ($id) = RedisSentinel::cli($main::Master, 'client', 'list')
           =~ /^id=(\d+) [^\n]*cmd=wait/m;
Test::More::ok($id, 'the WAIT\'s connection found');
RedisSentinel::cli($main::Master, 'client', 'kill', 'id', $id);
main::refused("b6-$_", main::done("b6-$_")) for 1, 2;
main::once_again('/w', 'b6-1', 'b6-2');
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
