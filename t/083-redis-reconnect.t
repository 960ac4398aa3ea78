# Calls that meet a reconnect (issue 45, points 5 and 6).  The commands
# issued while a connection to Redis is down (after CLIENT KILL, while
# Redis restarts) are held by the module and sent once it is connected
# again, each within its own timeout: no claim is refused, no final write
# is lost among calls answered 200.  Redis away past the timeout: the held
# commands are dropped and counted, the claim gets 503, nothing hangs.  An
# exiting worker (a reload) connects again for the final write it owes,
# and waits for its writes up to worker_shutdown_timeout + timeout.
#
# A Redis of its own on TEST_NGINX_REDIS_PORT + 470, restarted with its
# data (SHUTDOWN SAVE, then started on the same directory).  The owners
# are held at the backend (/hold/1) until every claim and first write is
# in Redis, so that no command is on the wire when the connection goes;
# then the connection goes, and the held calls end (their final writes)
# while new calls come, before the module is connected again.
#
# Plain Test::More: it needs a master process and reloads (IdemNginx).

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time);
use POSIX ();

use lib 't/lib';
use IdemNginx;
use IdemWait ();
use RedisSentinel ();

# a cluster of its own too (block 6), on TEST_NGINX_REDIS_PORT + 480..482
BEGIN {
    $ENV{TEST_NGINX_REDIS_CLUSTER_PORT} = ($ENV{TEST_NGINX_REDIS_PORT} || 0)
                                          + 480;
}
use RedisCluster ();

plan skip_all => 'TEST_NGINX_REDIS_PORT is not set (use util/test.sh)'
    unless $ENV{TEST_NGINX_REDIS_PORT} && $ENV{TEST_NGINX_BACKEND_PORT};
plan skip_all => 'background calls, timed: not under valgrind'
    if $ENV{TEST_NGINX_USE_VALGRIND};

my $rport = $ENV{TEST_NGINX_REDIS_PORT} + 470;
my $back = $ENV{TEST_NGINX_BACKEND_PORT};
my $port = IdemNginx::base_port() + 83;

my %bg;

my $cluster;

END {
    local $?;
    kill 'KILL', $_->[0] for values %bg;
    RedisSentinel::kill_node($rport, 'KILL');
    RedisCluster::stop() if $cluster;
}

RedisSentinel::kill_node($rport, 'KILL');
unlink RedisSentinel::dir($rport) . '/dump.rdb';
RedisSentinel::start_redis($rport);

my $ng = IdemNginx->new(name => 'reconnect', port => $port, workers => 2,
                        log_level => 'debug', worker_connections => 256);

sub conf {
    my ($timeout, $store) = @_;
    $store //= "127.0.0.1:$rport";
    my $loc = '';
    for (['d', 'idem_dedupe on; idem_dedupe_scope off;', '/hold/1'],
         ['r', 'idem_record on;', '/hold/1'],
         ['dq', 'idem_dedupe on; idem_dedupe_scope off;', '/ok'],
         ['rq', 'idem_record on;', '/ok'])
    {
        $loc .= "        location /$_->[0] { idem on; $_->[1] "
                . "proxy_pass http://127.0.0.1:$back$_->[2]; }\n";
    }
    return <<"HTTP";
    idem_redis $store timeout=$timeout;
    server {
        listen 127.0.0.1:$port;
$loc        location /calls/ { idem_status; }
        location /metrics { idem_metrics; }
    }
HTTP
}

# the record writes given up, as the metrics say (all workers, the old
# ones' too)
sub dropped {
    my $m = IdemWait::get($port, '/metrics');
    return $m =~ /^idem_record_writes_total\{result="dropped"\} (\d+)$/m
           ? $1 : -1;
}

# nginx (again) with the store's timeout, its log from here on
sub restart {
    my ($timeout, $store) = @_;
    $ng->stop_hard if $ng->master;
    $ng->write_conf(conf($timeout, $store));
    unlink $ng->error_log;
    $ng->start or BAIL_OUT('nginx does not start: ' . $ng->out);
    ok(IdemWait::wait_for('both workers connected',
           sub { log_n(qr/idem: redis "[^"]*": connected/) >= 2 }),
       "nginx up, timeout=$timeout, both workers connected");
}

sub log_n { IdemWait::log_count($_[0], $ng->error_log) }

sub cli { RedisSentinel::cli($rport, @_) }

# a call in the background: curl's answer in the server root
sub bg {
    my ($id, $path, $name) = @_;
    $name //= $id;
    my $out = $ng->servroot . "/bg-$name";
    unlink $out;
    my $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        { exec('curl', '-s', '-i', '--noproxy', '*', '--max-time', '30',
               '-o', $out, '-H', "X-Call-Id: $id", '--data', 'x=1',
               "http://127.0.0.1:$port$path") };
        POSIX::_exit(1);
    }
    $bg{$name} = [$pid, $out];
}

# the status code of a background call, once it ended (0: no answer)
sub code {
    my ($id) = @_;
    my ($pid, $out) = @{ delete $bg{$id} or die "no call $id" };
    waitpid($pid, 0);
    my $r = IdemNginx::slurp($out);
    return $r =~ m{^HTTP/1\.1 (\d+)} ? $1 : 0;
}

sub state {
    my $j = IdemWait::get($port, "/calls/$_[0]");
    return $j =~ /"state":"([A-Z_]+)"/ ? $1 : '?';
}

sub in_redis {
    return RedisCluster::cli(RedisCluster::base(), '-c', 'exists',
                             "idem:c:{$_[0]}") eq '1' if $cluster;
    return cli('exists', "idem:c:{$_[0]}") eq '1';
}

# owners held at the backend: their claims and first writes in Redis
sub hold {
    my ($p, $n) = @_;
    my @ids = map { ("$p-d$_", "$p-r$_") } 1 .. $n;
    bg($_, $_ =~ /-d\d+$/ ? '/d' : '/r') for @ids;
    ok(IdemWait::wait_for("$p: $n owners of each route at the backend, "
                          . 'their records in Redis',
           sub { !grep { IdemWait::backend_runs($_) < 1 || !in_redis($_) }
                 @ids }),
       "$p: the owners held, nothing on the wire");
    return @ids;
}

# the held owners end and new calls come: each ends 200, its record
# SUCCESS, a dedupe resend replayed; the claims refused and the final
# writes lost, counted
sub ends {
    my ($p, $n, $held) = @_;
    my @new = map { ("$p-dq$_", "$p-rq$_") } 1 .. $n;
    IdemWait::release($_) for @$held;
    bg($_, $_ =~ /-dq\d+$/ ? '/dq' : '/rq') for @new;
    return @new;
}

sub count {
    my ($p, @ids) = @_;
    my %code = map { ($_ => code($_)) } @ids;
    my @ok = grep { $code{$_} == 200 } @ids;
    my @refused = grep { $code{$_} != 200 } @ids;
    IdemWait::wait_for("$p: the final writes", sub {
        !grep { state($_) ne 'SUCCESS' } @ok }, 10);
    my @lost = grep { state($_) ne 'SUCCESS' } @ok;
    my @resent = grep { /-dq?\d+$/ } @ok;
    bg($_, $_ =~ /-dq\d+$/ ? '/dq' : '/d', "$_-again") for @resent;
    my @not_replayed = grep { code("$_-again") != 200 } @resent;
    is(scalar @refused, 0, "$p: no call refused (@refused)");
    is(scalar @lost, 0, "$p: no final write lost among the 200s (@lost)");
    is(scalar @not_replayed, 0,
       "$p: each dedupe call's resend replayed (@not_replayed)");
    is(IdemWait::backend_runs($_), 1, "$p: $_ ran once")
        for grep { /-dq?1$/ } @ids;
}

sub no_alert {
    my ($p) = @_;
    unlike($ng->log_text, qr/\[(?:alert|crit|emerg)\]|exited on signal/,
           "$p: no alert, no crash");
}


# 1. CLIENT KILL: the workers see their connections go; the final writes
# and the new calls that come before they are connected again wait for it

restart('3s');
{
    my @held = hold('kill', 10);
    my $lost = log_n(qr/connection lost/);
    cli('client', 'kill', 'type', 'normal');
    ok(IdemWait::wait_for('both workers saw their connection go',
           sub { log_n(qr/connection lost/) >= $lost + 2 }),
       'kill: both workers lost their connection');
    my @new = ends('kill', 10, \@held);
    count('kill', @held, @new);
    is(log_n(qr/dropped \(not connected\)/), 0, 'kill: nothing dropped');
    is(dropped(), 0, 'kill: no record write counted dropped');
    no_alert('kill');
}


# 2. Redis restarted (SHUTDOWN SAVE, started again with its data) within
# the store's timeout: what came meanwhile was held, and goes then

restart('5s');
{
    my @held = hold('restart', 10);
    my $lost = log_n(qr/connection lost/);
    cli('shutdown', 'save');
    ok(IdemWait::wait_for('both workers saw Redis go',
           sub { log_n(qr/connection lost/) >= $lost + 2 }),
       'restart: Redis gone, both workers saw it');
    my @new = ends('restart', 10, \@held);
    ok(IdemWait::wait_for('the commands held', sub {
           log_n(qr/held until "/) >= 30 || grep { -s $bg{$_}[1] } @new }),
       'restart: the final writes and the new calls held');
    RedisSentinel::start_redis($rport);
    count('restart', @held, @new);
    is(log_n(qr/dropped \(not connected\)/), 0, 'restart: nothing dropped');
    is(dropped(), 0, 'restart: no record write counted dropped');
    no_alert('restart');
}


# 3. Redis away past the timeout: the held commands are dropped and
# counted, the claims get 503 at their timeout, nothing hangs

restart('300ms');
{
    cli('shutdown', 'save');
    ok(IdemWait::wait_for('both workers saw Redis go',
           sub { log_n(qr/connection (?:lost|closed)/) >= 2 }),
       'away: Redis gone');
    my $t = time;
    bg("away-dq$_", '/dq') for 1 .. 3;
    my @codes = map { code("away-dq$_") } 1 .. 3;
    my $took = time - $t;
    is("@codes", '503 503 503', 'away: each claim 503');
    cmp_ok($took, '<', 5, 'away: answered at the timeout, nothing hangs');
    ok(IdemWait::wait_for('the drops reported',
           sub { log_n(qr/\d+ dropped \(not connected\)/) >= 1 }),
       'away: the held claims dropped, counted as not connected');
    is(IdemWait::backend_runs("away-dq$_"), 0, "away: away-dq$_ not run")
        for 1 .. 3;
    RedisSentinel::start_redis($rport);
    ok($ng->stop(10), 'away: nginx stops');
    no_alert('away');
}


# 3b. What a worker holds is bounded: with max_pending=3 (one worker), 3
# claims are held while Redis restarts and run once it is back; the 3
# more are refused at once, counted

{
    $ng->stop_hard if $ng->master;
    $ng->write_conf(conf('3s', "127.0.0.1:$rport max_pending=3"),
                    workers => 1);
    unlink $ng->error_log;
    $ng->start or BAIL_OUT('nginx does not start: ' . $ng->out);
    ok(IdemWait::wait_for('the worker connected',
           sub { log_n(qr/idem: redis "[^"]*": connected/) >= 1 }),
       'cap: nginx up, one worker, max_pending=3');
    cli('shutdown', 'save');
    ok(IdemWait::wait_for('the worker saw Redis go',
           sub { log_n(qr/connection lost/) >= 1 }),
       'cap: Redis gone');
    bg("cap-dq$_", '/dq') for 1 .. 6;
    ok(IdemWait::wait_for('3 claims held, 3 refused',
           sub { log_n(qr/held until "/) >= 3
                 && 3 == grep { -s $bg{"cap-dq$_"}[1] } 1 .. 6 }),
       'cap: 3 claims held, 3 answered at once');
    RedisSentinel::start_redis($rport);
    my @codes = sort map { code("cap-dq$_") } 1 .. 6;
    is("@codes", '200 200 200 503 503 503',
       'cap: the 3 held claims ran once Redis was back, 3 refused');
    ok(IdemWait::wait_for('the refusals reported',
           sub { log_n(qr/\d+ dropped \(3 pending\)/) >= 1 }),
       'cap: the refusals counted (3 pending)');
    is(log_n(qr/dropped \(not connected\)/), 0,
       'cap: nothing held was dropped');
    no_alert('cap');
}


# 4. A reload while owners run; Redis restarts while the old workers
# drain: the final writes they owe wait for it, and land

restart('5s');
{
    my @held = hold('reload', 3);
    my $quit = log_n(qr/gracefully shutting down/);
    ok($ng->reload, 'reload: HUP');
    ok(IdemWait::wait_for('the old workers exiting',
           sub { log_n(qr/gracefully shutting down/) >= $quit + 2 }),
       'reload: the old workers are exiting');
    my $lost = log_n(qr/connection lost/);
    cli('shutdown', 'save');
    ok(IdemWait::wait_for('the workers saw Redis go',
           sub { log_n(qr/connection lost/) >= $lost + 2 }),
       'reload: Redis gone');
    my $h = log_n(qr/held until "/);
    IdemWait::release($_) for @held;
    ok(IdemWait::wait_for('the final writes held',
           sub { log_n(qr/held until "/) >= $h + 6 }),
       'reload: the exiting workers hold the final writes they owe');
    RedisSentinel::start_redis($rport);
    count('reload', @held);
    no_alert('reload');
}



# 5. The drain is bounded by worker_shutdown_timeout (+ one timeout), not
# by 5 x timeout: a final write in flight to a paused Redis is waited for
# past 5 s (8 s + 1 s), and lands once Redis resumes; with 1 s, the worker
# gives up after about 2 s

sub drain {
    my ($shutdown, $p) = @_;
    $ng->stop_hard if $ng->master;
    $ng->write_conf(conf('1s'), main => "worker_shutdown_timeout $shutdown;");
    unlink $ng->error_log;
    $ng->start or BAIL_OUT('nginx does not start: ' . $ng->out);
    ok(IdemWait::wait_for('both workers connected',
           sub { log_n(qr/idem: redis "[^"]*": connected/) >= 2 }),
       "$p: nginx up, worker_shutdown_timeout $shutdown");
    my @held = hold($p, 1);
    ok($ng->reload, "$p: HUP");
    ok(IdemWait::wait_for('the old workers exiting',
           sub { log_n(qr/gracefully shutting down/) >= 2 }),
       "$p: the old workers are exiting");
    kill 'STOP', RedisSentinel::pid($rport);
    IdemWait::release($_) for @held;
    ok(IdemWait::wait_for('an old worker waiting for its replies',
           sub { log_n(qr/waiting for \d+ replies before exiting/) >= 1 }),
       "$p: an old worker waits for its final writes");
    return @held;
}

{
    my @held = drain('8s', 'drain');

    # nothing happens: no giving up at 5 x timeout (the old bound, 5 s);
    # a check that nothing happens can only wait a fixed time
    sleep 6;
    is(log_n(qr/gave up waiting/), 0,
       'drain: still waiting after 6 s (worker_shutdown_timeout 8s)');
    kill 'CONT', RedisSentinel::pid($rport);
    ok(IdemWait::wait_for('the replies',
           sub { log_n(qr/nothing outstanding after/) >= 1 }),
       'drain: the replies came, the worker exits');
    count('drain', @held);
    is(dropped(), 0, 'drain: the final writes answered late, none dropped');
    no_alert('drain');
}

{
    drain('1s', 'bound');
    ok(IdemWait::wait_for('the worker giving up',
           sub { log_n(qr/gave up waiting/) >= 1 }, 10),
       'bound: the worker gives up');
    my ($ms) = $ng->log_text
               =~ /gave up waiting for \d+ replies after (\d+) ms/;
    cmp_ok($ms // 99999, '<', 4000,
           'bound: after worker_shutdown_timeout + timeout, not 5 x timeout');
    is(dropped(), 2, 'bound: the two final writes given up, counted dropped');
    kill 'CONT', RedisSentinel::pid($rport);
    no_alert('bound');
}



# 6. A Redis Cluster: CLIENT KILL on each master; the calls that come
# before the workers are connected to them again wait for it

SKIP: {
    skip 'no redis-cli --cluster', 1
        unless `redis-cli --help 2>&1` =~ /--cluster/;
    $cluster = 1;
    RedisCluster::create(0);
    my @masters = map { RedisCluster::base() + $_ } 0 .. 2;
    restart('3s', 'cluster 127.0.0.1:' . RedisCluster::base());
    ok(IdemWait::wait_for('each worker connected to the three masters',
           sub { log_n(qr/idem: redis "[^"]*": connected/) >= 6 }),
       'cluster: the workers connected to every master');
    my @held = hold('cluster', 10);
    my $lost = log_n(qr/connection lost/);
    RedisCluster::cli($_, 'client', 'kill', 'type', 'normal') for @masters;
    ok(IdemWait::wait_for('the workers saw their connections go',
           sub { log_n(qr/connection lost/) >= $lost + 6 }),
       'cluster: both workers lost their three connections');
    my @new = ends('cluster', 10, \@held);
    count('cluster', @held, @new);
    no_alert('cluster');
}

ok($ng->stop, 'nginx stops');

done_testing();
