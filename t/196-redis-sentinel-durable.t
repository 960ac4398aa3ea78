# Issue 27's failover, for real (a master, a replica, 3 sentinels from
# t/lib/RedisSentinel.pm; a gateway with two workers, t/lib/IdemGateway.pm):
#
#  1. the replica's link is cut: the replica is stopped (SIGSTOP) and its
#     connection closed on the master (CLIENT KILL TYPE replica), so what
#     the master acknowledges now reaches no replica (a stopped process
#     would still take bytes into its socket and apply them later);
#  2. a call is sent;
#  3. the master is killed (SIGKILL), the replica resumed (SIGCONT), and
#     the sentinels promote it;
#  4. the same call id is sent again.
#
# On a plain dedupe route (/q) the backend runs the call twice: the claim
# was lost with the master.  On a durable route (/w, idem_dedupe_durable
# replicas=1) the call of step 2 is refused (503 claim-not-durable, not
# run), the same id runs once when it is sent again with a replica back,
# and a call claimed before the cut is not run again after the failover.
# Meanwhile a durable claim that waits for the replica does not delay the
# calls of a plain route.
#
# Plain Test::More: Redis processes are stopped, killed and promoted
# between requests.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(sleep time);
use POSIX ();
use lib 't/lib';
use RedisSentinel;
use IdemGateway;

my $backend = $ENV{TEST_NGINX_BACKEND_PORT}
    or plan skip_all => 'TEST_NGINX_BACKEND_PORT is not set (use make test)';
my $base = $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT} || 1984;
my $gw = $base + 175;
my $sentinels = join ' ', map { "127.0.0.1:$_" } RedisSentinel::sentinels();

END {
    local $?;
    IdemGateway::stop_all();
    RedisSentinel::stop();
}

sub call {
    my ($uri, $id) = @_;
    return scalar IdemGateway::send_all([$gw,
                                         IdemGateway::post($id, 'amount=10',
                                                           $uri)]);
}

sub runs { IdemGateway::backend_runs($backend, $_[0]) }

sub signal {
    my ($port, $sig) = @_;
    my $pid = RedisSentinel::pid($port) or return;
    kill $sig, $pid;
}

# a fresh set-up: the master on base, its replica, the sentinels, and a
# gateway whose two workers have both served a call
sub fresh {
    IdemGateway::stop_all();
    RedisSentinel::start();
    IdemGateway::start($gw, "idem_redis sentinel=mymaster $sentinels "
                            . "connect_timeout=300ms timeout=500ms",
                       $backend, durable => 'replicas=1 timeout=500ms');
    my $n = 0;
    RedisSentinel::wait_until(10, sub {
        my @r = IdemGateway::send_all(map {
            [$gw, IdemGateway::post("t196-warm-$$-" . $n++, 'x', '/q')]
        } 1 .. 4);
        return 4 == grep { IdemGateway::is_original($_) } @r;
    }) or BAIL_OUT('the gateway does not serve calls');
}

sub cut_link {
    signal(RedisSentinel::replica(), 'STOP');
    RedisSentinel::cli(RedisSentinel::master(), 'client', 'kill', 'type',
                       'replica');
}

# step 3: the master killed, the replica resumed, promoted, and both
# workers told (each follows its own sentinel's +switch-master)
sub fail_over {
    my $old = RedisSentinel::master();
    my $new = RedisSentinel::replica();
    my $at = length IdemGateway::log_text($gw);

    RedisSentinel::kill_node($old, 'KILL');
    signal($new, 'CONT');

    ok(RedisSentinel::wait_until(30, sub { RedisSentinel::agreed($new) }),
       'the sentinels promoted the replica')
        or diag(join "\n", RedisSentinel::events());

    # "(switched, ...)": +switch-master; "(asked, ...)": a worker whose
    # master connection kept failing asked another sentinel first
    my $switch = qr/\] (\d+)#\d+: [^\n]*master "mymaster" is /
                 . qr/127\.0\.0\.1:$new \((?:switched|asked)/;
    ok(RedisSentinel::wait_until(10, sub {
           my %pids = map { $_ => 1 }
                      substr(IdemGateway::log_text($gw), $at) =~ /$switch/g;
           return keys %pids == 2;
       }), 'both workers follow the new master');
}


# without the directive: two executions

fresh();

{
    my $id = "t196-plain-$$";

    cut_link();
    my $r = call('/q', $id);
    ok(IdemGateway::is_original($r), 'step 2: the call is served')
        or diag(IdemGateway::summary($r));

    fail_over();

    $r = call('/q', $id);
    ok(IdemGateway::is_original($r),
       'step 4: the new master never heard of the id: served again')
        or diag(IdemGateway::summary($r));
    is(runs($id), 2, 'without idem_dedupe_durable the call ran twice');
}


# with idem_dedupe_durable replicas=1: refused or durable, run once

fresh();

{
    my $before = "t196-before-$$";
    my $id = "t196-durable-$$";

    my $t0 = time;
    my $r = call('/w', $before);
    my $took = time - $t0;
    ok(IdemGateway::is_original($r), 'a durable call with the replica up')
        or diag(IdemGateway::summary($r));
    diag(sprintf 'a durable call, the replica confirming: %.1f ms',
         $took * 1000);

    cut_link();

    # the durable call waits for the replica in a child; calls on the
    # plain route meanwhile, on both workers, are not held up by it

    pipe my $rd, my $wr or die "pipe: $!";
    my $pid = fork // die "fork: $!";

    if ($pid == 0) {
        close $rd;
        my $t = time;
        my $c = call('/w', $id);
        printf $wr "%s %.3f %s\n", $c ? $c->{status} : 'none', time - $t,
               $c && $c->{body} =~ /problem:claim-not-durable/ ? 'type' : '-';
        close $wr;

        # not through END: the parent's Redis and gateway stay up
        POSIX::_exit(0);
    }

    close $wr;
    sleep 0.1;

    my ($slowest, $served) = (0, 0);
    for my $k (1 .. 8) {
        my $t = time;
        my $q = call('/q', "t196-meanwhile-$$-$k");
        $slowest = time - $t if time - $t > $slowest;
        $served++ if IdemGateway::is_original($q);
    }

    waitpid $pid, 0;
    my ($status, $waited, $type) = split ' ', scalar(<$rd>) // 'none 0 -';

    is($served, 8, 'the plain route serves calls meanwhile');
    ok($slowest < 0.25, 'none of them waits for the WAIT')
        or diag(sprintf 'the slowest took %.0f ms', $slowest * 1000);
    diag(sprintf 'plain calls during a WAIT of 500 ms: the slowest took '
                 . '%.1f ms', $slowest * 1000);

    is($status, '503', 'step 2: the call is refused: no replica confirms '
                       . 'its claim');
    is($type, 'type', 'as claim-not-durable');
    ok($waited >= 0.45 && $waited < 1.5, 'within its timeout (500 ms)')
        or diag("it took $waited s");
    is(runs($id), 0, 'it was not forwarded');

    fail_over();

    # the promoted replica has no replica of its own: the old master
    # comes back as one
    my $new = RedisSentinel::replica();
    RedisSentinel::start_redis(RedisSentinel::master(), $new);
    ok(RedisSentinel::wait_until(20, sub {
           RedisSentinel::replicated($new)
       }), 'the old master is a replica of the new one, and acknowledges');

    $r = call('/w', $id);
    ok(IdemGateway::is_original($r), 'step 4: the refused id is served')
        or diag(IdemGateway::summary($r) . ' ' . ($r ? $r->{body} : ''));
    $r = call('/w', $id);
    ok(IdemGateway::is_duplicate($r), 'and its duplicate is not')
        or diag(IdemGateway::summary($r));
    is(runs($id), 1, 'with idem_dedupe_durable the call ran once');

    $r = call('/w', $before);
    ok(!IdemGateway::is_original($r)
       && $r && ($r->{status} == 200 || $r->{status} == 409),
       'the call confirmed before the cut is known on the new master')
        or diag(IdemGateway::summary($r));
    is(runs($before), 1, 'and ran once');
}

# the lost master's lines: its connections, the writes dropped meanwhile
IdemGateway::stop_all();

my @bad = IdemGateway::bad_lines($gw,
    qr/idem: redis "(?:127\.0\.0\.1:\d+|sentinel=mymaster)": /
    . qr/(?:connect|connection lost|since the last report)/);
is(scalar @bad, 0, 'nothing logged but the lost master')
    or diag(join "\n", @bad[0 .. ($#bad < 4 ? $#bad : 4)]);
unlike(IdemGateway::log_text($gw),
       qr/\[(?:alert|crit|emerg)\]|exited on signal/, 'no alert, no crash');

done_testing();
