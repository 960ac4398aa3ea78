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
# calls of a plain route.  The steps and their checks: t/lib/IdemFailover.pm.
#
# Plain Test::More: Redis processes are stopped, killed and promoted
# between requests.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(sleep time);
use lib 't/lib';
use RedisSentinel;
use IdemGateway;
use IdemFailover;

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

# step 1: a stopped process would still take bytes into its socket and
# apply them when resumed: its link is closed on the master too
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

# the promoted replica has no replica of its own: the old master comes
# back as one
sub replica_back {
    my $new = RedisSentinel::replica();
    RedisSentinel::start_redis(RedisSentinel::master(), $new);
    ok(RedisSentinel::wait_until(20, sub {
           RedisSentinel::replicated($new)
       }), 'the old master is a replica of the new one, and acknowledges');
}

my $steps = IdemFailover->new(gw => $gw, backend => $backend, tag => 't196',
                              where => 'the new master',
                              cut => \&cut_link, fail_over => \&fail_over,
                              replica_back => \&replica_back);


# without the directive: two executions

fresh();
$steps->twice("t196-plain-$$");


# with idem_dedupe_durable replicas=1: refused or durable, run once

fresh();
$steps->once("t196-before-$$", "t196-durable-$$");

$steps->log_ok('sentinel=mymaster');

done_testing();
