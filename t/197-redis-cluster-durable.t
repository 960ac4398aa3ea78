# Issue 27's failover on a Redis Cluster (3 masters with a replica each,
# t/lib/RedisCluster.pm; a gateway with two workers, t/lib/IdemGateway.pm),
# on one master's slots ("the victim"):
#
#  1. its replica's link is cut: the replica is stopped (SIGSTOP) and its
#     replication connection closed on the master (CLIENT KILL TYPE
#     replica);
#  2. a call is sent;
#  3. the master is killed (SIGKILL), the replica resumed (SIGCONT), and
#     the cluster promotes it;
#  4. the same call id is sent again.
#
# On a plain dedupe route (/q) the backend runs the call twice.  On a
# durable route (/w, idem_dedupe_durable replicas=1) the WAIT goes to the
# master of the call's slot: the call of step 2 is refused (503
# claim-not-durable), the same id runs once when sent again with a replica
# back (the old master, restarted, rejoins as one), and a call confirmed
# before the cut is not run again.  The steps and their checks:
# t/lib/IdemFailover.pm.
#
# Plain Test::More, as t/185.

use strict;
use warnings;
use Test::More;
use lib 't/lib';
use RedisCluster;
use RedisSentinel ();
use IdemGateway;
use IdemFailover;

my $backend = $ENV{TEST_NGINX_BACKEND_PORT}
    or plan skip_all => 'TEST_NGINX_BACKEND_PORT is not set (use make test)';
my $base = $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT} || 1984;
my $gw = $base + 176;

END {
    local $?;
    IdemGateway::stop_all();
    RedisCluster::stop();
}

my ($victim, $replica, $map, $steps);
my $n = 0;

# a fresh id on the victim's slots
sub victim_id {
    my ($tag) = @_;
    while (1) {
        my $id = "t197-$$-$tag-" . $n++;
        my $owner = $map->[IdemGateway::slot($id)];
        return $id if defined $owner && $owner == $victim;
    }
}

# a fresh cluster, the victim (the first master) and its replica, and a
# gateway that serves calls on the victim's slots
sub fresh {
    IdemGateway::stop_all();
    my @nodes = RedisCluster::create(1);
    $map = RedisCluster::slot_map();
    $victim = $nodes[0];
    my $id = RedisCluster::node_id($victim);

    # the victim's replica, once the victim's view of the cluster has it
    # (a new cluster's nodes learn of each other by gossip)
    $replica = RedisSentinel::wait_until(10, sub {
        my ($port) = map { /:(\d+)@/ ? $1 : () }
                     grep { /\bslave $id\b/ }
                     split /\n/, RedisCluster::cli($victim, 'cluster',
                                                   'nodes');
        return $port;
    });
    die "no replica of :$victim\n" unless $replica;

    IdemGateway::start($gw, "idem_redis cluster 127.0.0.1:$nodes[0] "
                            . "127.0.0.1:$nodes[1] connect_timeout=300ms "
                            . "timeout=500ms",
                       $backend, durable => 'replicas=1 timeout=500ms');
    RedisSentinel::wait_until(10, sub {
        my @r = IdemGateway::send_all(map {
            [$gw, IdemGateway::post(victim_id('warm'), 'x', '/q')]
        } 1 .. 4);
        return 4 == grep { IdemGateway::is_original($_) } @r;
    }) or BAIL_OUT('the gateway does not serve calls');
}

sub signal {
    my ($port, $sig) = @_;
    my $pid = RedisCluster::pid($port) or return;
    kill $sig, $pid;
}

# step 1, as t/196 does it
sub cut_link {
    signal($replica, 'STOP');
    RedisCluster::cli($victim, 'client', 'kill', 'type', 'replica');
}

# step 3: the master killed, its replica resumed and promoted, and the
# gateway serving the victim's slots from it
sub fail_over {
    RedisCluster::kill_node($victim, 'KILL');
    signal($replica, 'CONT');

    ok(RedisSentinel::wait_until(30, sub {
           RedisCluster::cli($replica, 'role') =~ /\Amaster/
       }), "the replica :$replica is promoted");
    ok(RedisSentinel::wait_until(10, sub {
           IdemGateway::is_original($steps->call('/q', victim_id('after')))
           && IdemGateway::is_original($steps->call('/q',
                                                    victim_id('after')))
       }), 'the gateway serves the slots from it');
}

# the old master, back, rejoins as the promoted one's replica
sub replica_back {
    my ($id) = @_;
    RedisCluster::start_node($victim);
    ok(RedisSentinel::wait_until(30, sub {
           RedisSentinel::replicated($replica, "idem-test:{$id}")
       }), 'the old master is a replica again, and acknowledges');
}

$steps = IdemFailover->new(gw => $gw, backend => $backend, tag => 't197',
                           where => 'the promoted replica',
                           cut => \&cut_link, fail_over => \&fail_over,
                           replica_back => \&replica_back,
                           fresh => sub { victim_id('again') });


# without the directive: two executions

fresh();
$steps->twice(victim_id('plain'));


# with idem_dedupe_durable replicas=1: refused or durable, run once

fresh();
$steps->once(victim_id('before'), victim_id('durable'));

$steps->log_ok('cluster');

done_testing();
