# Redis Sentinel failover, for real (a master, a replica, 3 sentinels from
# t/lib/RedisSentinel.pm; a gateway with two workers):
#
#  1. the master is killed (SIGKILL): dedupe calls get 503 until the
#     sentinels promote the replica and announce it (+switch-master), then
#     go to the new master, without a reload; their number is reported;
#     a record written before the kill is read on the new master;
#  2. the old master comes back as a replica and a manual SENTINEL
#     FAILOVER moves the master back: the gateway follows again.
#
# Plain Test::More: Redis processes are killed and failed over between
# requests, and calls are counted while that happens.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(sleep time);
use lib 't/lib';
use RedisSentinel;
use IdemGateway;
use IdemWait qw(wait_for);

my $backend = $ENV{TEST_NGINX_BACKEND_PORT}
    or plan skip_all => 'TEST_NGINX_BACKEND_PORT is not set (use make test)';
my $base = $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT} || 1984;
my $gw = $base + 155;

END {
    local $?;
    IdemGateway::stop_all();
    RedisSentinel::stop();
}

RedisSentinel::start();
my $sentinels = join ' ', map { "127.0.0.1:$_" } RedisSentinel::sentinels();
my $master_pid = IdemGateway::start($gw,
    "idem_redis sentinel=mymaster $sentinels connect_timeout=300ms "
    . "timeout=500ms", $backend);

# both workers have the master a sentinel named (their lines), rather than
# a fixed time a loaded machine may need more than
ok(wait_for('the master named to both workers', sub {
       my @named = IdemGateway::log_text($gw)
           =~ /idem: redis sentinel: master "mymaster" is /g;
       return @named >= 2;
   }), 'both workers know the master');

my $n = 0;
sub fresh_id { "t155-$$-" . $n++ }

sub call {
    my ($id) = @_;
    return scalar IdemGateway::send_all([$gw, IdemGateway::post($id, 'x=1',
                                                                '/q')]);
}

sub status_of {
    my ($id) = @_;
    return scalar IdemGateway::send_all([$gw,
                                         IdemGateway::get("/_idem/calls/$id")]);
}

sub has_key {
    my ($port, $id) = @_;
    return RedisSentinel::cli($port, 'exists', "idem:c:{$id}") eq '1';
}

# calls, one every 50 ms, until 10 in a row are served (or 30 s)
sub until_served {
    my ($t0) = @_;
    my ($calls, $failed, $other, $ok_run, $first_ok) = (0, 0, 0, 0);
    while (time - $t0 < 30 && $ok_run < 10) {
        my $r = call(fresh_id());
        $calls++;
        if (IdemGateway::is_original($r)) {
            $first_ok //= time - $t0;
            $ok_run++;
        } else {
            if (defined $r && $r->{status} == 503) {
                $failed++;
            } else {
                $other++;
            }
            $ok_run = 0;
        }
        sleep 0.05;
    }
    return ($ok_run >= 10, $calls, $failed, $other, $first_ok);
}

# how many of the 2 workers logged the switch from $from to $to (after
# the log's first $at bytes), within 10 s: each follows its own
# sentinel's +switch-master, and one that learns of a failover later
# writes to the old master meanwhile.  A worker whose connects to the
# dead master failed three times asks a sentinel itself, and may have
# the new master from that answer ("asked") before the message comes
# (a loaded machine: ASan beside another suite in CI)
sub workers_followed {
    my ($to, $from, $at) = @_;
    my ($n, $until) = (0, time + 10);
    my $switch = qr/\] (\d+)#\d+: [^\n]*idem: redis sentinel: master /
                 . qr/"mymaster" is 127\.0\.0\.1:$to \((?:switched|asked), /
                 . qr/was 127\.0\.0\.1:$from\)/;
    while (time < $until) {
        my $log = substr(IdemGateway::log_text($gw), $at // 0);
        my %pids = map { $_ => 1 } $log =~ /$switch/g;
        $n = keys %pids;
        last if $n == 2;
        sleep 0.2;
    }
    return $n;
}


# 1. the master killed

{
    my $old = RedisSentinel::master();
    my $new = RedisSentinel::replica();

    my $before = fresh_id();
    ok(IdemGateway::is_original(call($before)), 'a call before the kill');
    ok(has_key($old, $before), 'its record is on the master');
    RedisSentinel::cli($old, 'wait', 1, 1000);

    my $t0 = time;
    RedisSentinel::kill_node($old, 'KILL');

    my ($served, $calls, $failed, $other, $first_ok) = until_served($t0);
    ok($served, 'calls are served again after the failover');
    is($other, 0, 'meanwhile calls got 503, nothing else');
    # the leader announces at once; the others hear from it within 2 s
    ok(RedisSentinel::wait_until(10, sub { RedisSentinel::agreed($new) }),
       'the sentinels promoted the replica (every one says so)')
        or diag(join "\n", 'master now: ' . RedisSentinel::master_port(),
                RedisSentinel::events());
    diag(sprintf 'sentinel failover: %d of %d calls got 503; served again '
                 . '%.1f s after the kill (down-after 2 s)',
         $failed, $calls, $first_ok // -1);
    is(workers_followed($new, $old), 2,
       'both workers followed the failover');

    my $after = fresh_id();
    ok(IdemGateway::is_original(call($after)), 'a call after the failover');
    ok(has_key($new, $after), 'its record is on the new master');
    my $st = status_of($before);
    like($st->{body}, qr/"state":"SUCCESS"/,
         'the record written before the kill is read on the new master')
        or diag(IdemGateway::summary($st) . " $st->{body}");
    ok(kill(0, $master_pid), 'without a reload (the same nginx)');
}


# 2. the old master back as a replica, then a manual failover back to it

{
    my $old = RedisSentinel::master();
    my $cur = RedisSentinel::replica();

    RedisSentinel::start_redis($old, $cur);
    my $until = time + 20;
    while (time < $until) {
        last if RedisSentinel::cli($cur, 'info', 'replication')
                =~ /connected_slaves:1.*state=online/s;
        sleep 0.2;
    }

    # every sentinel must name the same master with the other one as its
    # replica, and none be failing over, before the planned failover: the
    # sentinels may have failed over once more by themselves (a loaded
    # machine), and the planned one then goes the other way
    my $from = RedisSentinel::wait_until(20, sub {
        (grep { RedisSentinel::settled($_) } $cur, $old)[0]
    });
    ok(defined $from, 'the sentinels agree: the old master is a replica '
                      . 'now')
        or diag(join "\n", RedisSentinel::events());
    $from //= $cur;
    my $to = $from == $cur ? $old : $cur;
    diag("the sentinels failed over again by themselves: the planned "
         . "failover goes from $from to $to") if $from != $cur;
    my $log_at = length IdemGateway::log_text($gw);

    $until = time + 20;
    my $reply = '';
    while (time < $until) {
        $reply = RedisSentinel::cli((RedisSentinel::sentinels())[0],
                                    'sentinel', 'failover', 'mymaster');
        last if $reply eq 'OK';
        sleep 0.5;
    }
    is($reply, 'OK', 'SENTINEL FAILOVER accepted');

    # calls for 5 s from the failover on: how many were not served
    my ($calls, $failed, %why) = (0, 0);
    my $t0 = time;
    while (time - $t0 < 5) {
        my $r = call(fresh_id());
        $calls++;
        unless (IdemGateway::is_original($r)) {
            $failed++;
            $why{IdemGateway::summary($r)}++;
        }
        sleep 0.05;
    }
    ok(RedisSentinel::wait_until(10, sub { RedisSentinel::agreed($to) }),
       'the master moved (every sentinel says so)')
        or diag(join "\n", 'master now: ' . RedisSentinel::master_port(),
                RedisSentinel::events());

    is(workers_followed($to, $from, $log_at), 2, 'both workers followed it');
    my ($served) = until_served(time);
    ok($served, 'calls are served on the new master');
    diag(sprintf 'manual failover: %d of %d calls in 5 s not served (%s)',
         $failed, $calls, join(', ', map { "$_: $why{$_}" } sort keys %why));

    my $id = fresh_id();
    ok(IdemGateway::is_original(call($id)), 'a call after the failover');
    ok(has_key($to, $id), 'its record is on the new master');
}

IdemGateway::stop_all();

my @bad = IdemGateway::bad_lines($gw,
    qr/idem: redis "(?:127\.0\.0\.1:\d+|sentinel=mymaster)": (?:connect|connection lost|since the last report)/);
is(scalar @bad, 0, 'nothing logged but the lost master')
    or diag(join "\n", @bad[0 .. ($#bad < 4 ? $#bad : 4)]);
unlike(IdemGateway::log_text($gw), qr/\[(?:alert|crit|emerg)\]|exited on signal/,
       'no alert, no crash');

done_testing();
