#!/usr/bin/perl
# make chaos: exactly once through Redis failovers, under load (issue 27).
#
#   bench/chaos.pl            (CHAOS_SECONDS=90 by default, at most 280:
#                             with its set-up and last duplicates, the
#                             run ends within 5 minutes)
#
# On loopback only, and it stops by itself: a Sentinel set-up (a master,
# two replicas, 3 sentinels: t/lib/RedisSentinel.pm), two gateways with two
# workers each (t/lib/IdemGateway.pm) in front of util/backend.pl, which
# logs every execution of a call id in a file of its own.  Every 100 ms a
# new call id on each of two routes, /q (dedupe) and /w (dedupe with
# idem_dedupe_durable, replicas= every replica: 2, or 1 on a Cluster's
# shards; timeout=500ms), each sent 2 or 3 times:
# to either gateway, at once or after a random delay of up to 6 s.
# Faults on a schedule (scaled to the run's length):
#
#   both replicas' links cut (SIGSTOP, CLIENT KILL TYPE replica), the
#   master killed half a second later, the replicas resumed and one
#   promoted, the old master back as a replica; a replica paused 1.5 s; a
#   gateway worker killed (SIGKILL) mid-call; the master paused past the
#   sentinels' down-after (it comes back as a replica); a replica
#   restarted.
#
# CHAOS_REDIS=cluster: the same on a Redis Cluster of 3 masters with a
# replica each (t/lib/RedisCluster.pm), the faults on its nodes: the
# first master's replica link cut, that master killed and its replica
# promoted by the cluster, the old master back (a replica); a replica
# paused; a worker killed; the second master paused past the cluster's
# node timeout (1 s), its replica promoted; a replica restarted.
#
# Then per route: calls, ids, executions, ids executed more than once, ids
# refused (503) at least once, ids answered UNKNOWN (409
# call-outcome-unknown).  Exit 1 when an id of the durable route ran more
# than once, 2 when it could not run.  Ports: CHAOS_PORT (25000) and up;
# Redis from TEST_NGINX_REDIS_SENTINEL_PORT (CHAOS_PORT + 100), or
# TEST_NGINX_REDIS_CLUSTER_PORT (CHAOS_PORT + 300).

use strict;
use warnings;
use FindBin;
use Time::HiRes qw(sleep time);
use File::Path qw(make_path remove_tree);

my ($port, $secs);

BEGIN {
    $port = $ENV{CHAOS_PORT} || 25000;
    $ENV{TEST_NGINX_REDIS_SENTINEL_PORT} ||= $port + 100;
    $ENV{TEST_NGINX_REDIS_CLUSTER_PORT} ||= $port + 300;
    $ENV{TEST_NGINX_BINARY} ||= '/usr/sbin/nginx';
    $ENV{TEST_NGINX_LOAD_MODULES} ||=
        "$FindBin::Bin/../build/ngx_http_idem_module.so";
}

use lib "$FindBin::Bin/../t/lib";
use RedisSentinel;
use RedisCluster;
use IdemGateway;

my $cluster = ($ENV{CHAOS_REDIS} // 'sentinel') eq 'cluster';
die "chaos: CHAOS_REDIS is sentinel or cluster\n"
    unless $cluster || ($ENV{CHAOS_REDIS} // 'sentinel') eq 'sentinel';

$secs = $ENV{CHAOS_SECONDS} || 90;
die "chaos: CHAOS_SECONDS must be from 20 to 280\n"
    unless $secs =~ /^\d+$/ && $secs >= 20 && $secs <= 280;

my @gw = ($port, $port + 1);
my $backend = $port + 2;
my $state = "$FindBin::Bin/../build/chaos/backend";
my @routes = ('/q', '/w');
my %name = ('/q' => 'dedupe', '/w' => 'durable');

my $backend_pid;

END {
    local $?;
    IdemGateway::stop_all();
    $cluster ? RedisCluster::stop() : RedisSentinel::stop();
    kill 'TERM', $backend_pid if $backend_pid;
}

$SIG{INT} = $SIG{TERM} = sub { exit 2 };

sub note { printf "chaos %5.1fs: %s\n", time - $main::t0, "@_" }

# ---------------------------------------------------------------- set-up

our $t0 = time;

remove_tree($state);
make_path($state);
$backend_pid = fork // die "fork: $!";
if ($backend_pid == 0) {
    exec 'perl', "$FindBin::Bin/../util/backend.pl", $backend, $state;
    die "backend.pl: $!";
}

my $redis;

if ($cluster) {
    RedisCluster::create(1);
    $redis = "idem_redis cluster 127.0.0.1:" . RedisCluster::base()
             . " connect_timeout=300ms timeout=500ms";

} else {
    RedisSentinel::start(replicas => 2);
    $redis = "idem_redis sentinel=mymaster "
             . join(' ', map { "127.0.0.1:$_" } RedisSentinel::sentinels())
             . " connect_timeout=300ms timeout=500ms";
}

my %gw_pid = map {
    $_ => IdemGateway::start($_, $redis, $backend,
                             durable => ($cluster ? 'replicas=1'
                                                  : 'replicas=2')
                                        . ' timeout=500ms',
                             log => 'notice')
} @gw;
note("gateways :$gw[0] :$gw[1], backend :$backend, "
    . ($cluster ? "a cluster from :" . RedisCluster::base()
                : "master :" . RedisSentinel::master())
    . ", $secs s of load");

# ---------------------------------------------------------------- faults

sub signal {
    my ($p, $sig) = @_;
    my $pid = ($cluster ? RedisCluster::pid($p) : RedisSentinel::pid($p))
        or return;
    kill $sig, $pid;
}

# a cluster's master port of a slot range's first master, and its replica,
# as the nodes say now: ("master", "replica") of the n-th master's shard
sub shard {
    my ($n) = @_;
    my (%port, %master_of, @masters);
    for my $line (split /\n/, RedisCluster::cli(RedisCluster::base() + $n,
                                               'cluster', 'nodes')) {
        my @f = split ' ', $line;
        next if @f < 4 || $f[2] =~ /fail/;
        my ($p) = $f[1] =~ /:(\d+)/;
        $port{$f[0]} = $p;
        $master_of{$p} = $f[3] if $f[2] =~ /slave/;
        push @masters, [$f[0], $p, $f[8] // ''] if $f[2] =~ /master/;
    }
    # the shard that holds slot 0 (n = 0) or 5461 (n = 1)
    my $slot = $n ? 5461 : 0;
    for my $m (@masters) {
        my ($a, $b) = split /-/, $m->[2];
        next unless defined $a && $a =~ /^\d+$/;
        $b //= $a;
        next unless $slot >= $a && $slot <= $b;
        my ($r) = grep { $master_of{$_} eq $m->[0] } keys %master_of;
        return ($m->[1], $r);
    }
    return;
}

my @cluster_faults;
my ($c_m, $c_r, $c_paused);

@cluster_faults = (
    [0.10, 0, 'a master\'s replica link cut', sub {
        ($c_m, $c_r) = shard(0);
        die "chaos: no master or replica of slot 0\n" unless $c_m && $c_r;
        note("  master :$c_m, its replica :$c_r");
        signal($c_r, 'STOP');
        RedisCluster::cli($c_m, 'client', 'kill', 'type', 'replica');
    }],
    [0.10, 1, 'that master killed, its replica resumed', sub {
        RedisCluster::kill_node($c_m, 'KILL');
        signal($c_r, 'CONT');
    }],
    [0.25, 0, 'the old master back (a replica now)', sub {
        RedisCluster::start_node($c_m);
    }],
    [0.35, 0, 'a replica paused', sub {
        $c_paused = (shard(1))[1];
        note("  replica :" . ($c_paused // '?'));
        signal($c_paused, 'STOP');
    }],
    [0.35, 1.5, 'the replica resumed', sub { signal($c_paused, 'CONT') }],
    [0.45, 0, 'a gateway worker killed', sub {
        my @w = split ' ', `pgrep -P $gw_pid{$gw[0]}`;
        kill 'KILL', $w[0] if @w;
    }],
    [0.55, 0, 'another master paused (node timeout 1 s)', sub {
        $c_paused = (shard(1))[0];
        note("  master :" . ($c_paused // '?'));
        signal($c_paused, 'STOP');
    }],
    [0.55, 3, 'that master resumed', sub { signal($c_paused, 'CONT') }],
    [0.75, 0, 'a replica restarted', sub {
        my $r = (shard(0))[1] or return;
        note("  replica :$r");
        RedisCluster::kill_node($r, 'TERM');
        RedisCluster::start_node($r);
    }],
) if $cluster;

# the master and its replicas now, as the sentinels say
sub roles {
    my $m = RedisSentinel::master_port() || RedisSentinel::master();
    return ($m, grep { $_ != $m } RedisSentinel::master(),
                                  RedisSentinel::replica(),
                                  RedisSentinel::replica2());
}

# [when (a share of the run, plus seconds), what, how]: each step is
# quick, the load goes on between the steps of a fault
my ($cut_m, @cut_r, $paused);

my @faults = (
    [0.10, 0, 'both replicas\' links cut', sub {
        ($cut_m, @cut_r) = roles();
        signal($_, 'STOP') for @cut_r;
        RedisSentinel::cli($cut_m, 'client', 'kill', 'type', 'replica');
    }],
    [0.10, 1, 'the master killed, the replicas resumed', sub {
        RedisSentinel::kill_node($cut_m, 'KILL');
        signal($_, 'CONT') for @cut_r;
    }],
    [0.25, 0, 'the old master back, as a replica', sub {
        RedisSentinel::start_redis($cut_m, (roles())[0]);
    }],
    [0.35, 0, 'the replica paused', sub {
        $paused = (roles())[1];
        signal($paused, 'STOP');
    }],
    [0.35, 1.5, 'the replica resumed', sub { signal($paused, 'CONT') }],
    [0.45, 0, 'a gateway worker killed', sub {
        my @w = split ' ', `pgrep -P $gw_pid{$gw[0]}`;
        kill 'KILL', $w[0] if @w;
    }],
    [0.55, 0, 'the master paused (down-after 2 s)', sub {
        $paused = (roles())[0];
        signal($paused, 'STOP');
    }],
    [0.55, 3, 'the master resumed', sub { signal($paused, 'CONT') }],
    [0.75, 0, 'the replica restarted', sub {
        my ($m, $r) = roles();
        RedisSentinel::kill_node($r, 'TERM');
        RedisSentinel::start_redis($r, $m);
    }],
);

# ---------------------------------------------------------------- load

my (%sent, %answers, @queue);
my $n = 0;

sub tally {
    my ($route, $id, $r) = @_;
    my $k = !defined $r ? 'none'
          : $r->{status} == 200
            ? (exists $r->{h}{'idempotent-replayed'} ? 'replay' : 'ok')
          : $r->{body} =~ /problem:([a-z-]+)/ ? "$r->{status} $1"
          : $r->{status};
    $answers{$route}{$id}{$k}++;
}

sub send_due {
    my ($now) = @_;
    my @due = grep { $_->[0] <= $now } @queue;
    @queue = grep { $_->[0] > $now } @queue;
    return unless @due;
    my @r = IdemGateway::send_all(map {
        [$_->[3], IdemGateway::post($_->[2], "id=$_->[2]", $_->[1])]
    } @due);
    tally($due[$_][1], $due[$_][2], $r[$_]) for 0 .. $#due;
}

@faults = @cluster_faults if $cluster;

local $IdemGateway::Timeout = 3;
my $next_fault = 0;
my $tick = 0;

while (time - $t0 < $secs) {
    my $now = time;

    if ($next_fault < @faults
        && $now - $t0 >= $faults[$next_fault][0] * $secs
                         + $faults[$next_fault][1])
    {
        note("fault: $faults[$next_fault][2]");
        $faults[$next_fault][3]->();
        $next_fault++;
        next;
    }

    for my $route (@routes) {
        my $id = "chaos-$$-$name{$route}-" . $n++;
        $sent{$route}{$id} = 1 + (rand() < 0.5 ? 2 : 1);
        my $g = $gw[rand 2];
        push @queue, [$now, $route, $id, $g];
        push @queue, [rand() < 0.5 ? $now : $now + rand 6, $route, $id,
                      $gw[rand 2]]
            for 2 .. $sent{$route}{$id};
    }

    send_due($now);
    sleep 0.1 - (time - $now) if time - $now < 0.1;
}

note('load over, the delayed duplicates now');
send_due(time), sleep 0.2 while @queue;
sleep 1;

# ---------------------------------------------------------------- checks

sub runs {
    my ($id) = @_;
    open my $fh, '<', "$state/$id" or return 0;
    my @l = grep { /\S/ } <$fh>;
    return scalar @l;
}

my $status = 0;

for my $route (@routes) {
    my ($calls, $ids, $execs, $twice, $refused, $unknown, $never) =
        (0) x 7;
    for my $id (keys %{ $sent{$route} }) {
        my $r = runs($id);
        my $a = $answers{$route}{$id} || {};
        $ids++;
        $calls += $sent{$route}{$id};
        $execs += $r;
        $twice++ if $r > 1;
        $never++ if $r == 0;
        $refused++ if grep { /^503 / } keys %$a;
        $unknown++ if $a->{'409 call-outcome-unknown'};
    }
    printf "%-8s %s: %d calls, %d ids, %d executions, %d ids executed "
           . "more than once, %d ids refused (503), %d ids UNKNOWN, %d "
           . "never executed\n", $name{$route}, $route, $calls, $ids,
           $execs, $twice, $refused, $unknown, $never;
    $status = 1 if $route eq '/w' && $twice;
}

for my $g (@gw) {
    my $crash = grep { /\[(?:alert|crit|emerg)\]|exited on signal/
                       && !/exited on signal 9/ }
                split /\n/, IdemGateway::log_text($g);
    print "gateway :$g: $crash alert/crash line(s) in its log\n" if $crash;
}

print $status ? "FAIL: a durable call id ran more than once\n"
              : "ok: no durable call id ran more than once\n";
exit $status;
