# Redis Cluster under change, for real (3 masters, a replica each, from
# t/lib/RedisCluster.pm; two gateways with two workers each):
#
#  1. a slot migrated mid-run: while it is MIGRATING, new keys of the slot
#     are written on the target through ASK (+ ASKING), old ones read on
#     the source, then on the target once moved; after SETSLOT NODE the
#     source answers MOVED and the gateways read the new map; no call
#     fails at any step, durable claims (idem_dedupe_durable, their WAIT
#     on the node that took the claim) included;
#  2. two gateways, 50 concurrent duplicates of each of 6 ids (spread over
#     the 3 masters): one execution per id, every other answer a 409 or a
#     replay; a reload with calls in flight loses none of their records; a
#     paused master fails its own calls only, after their timeout;
#  3. a master killed (SIGKILL) and its replica promoted: calls on its
#     slots get 503 until the gateways read the new map (their number is
#     reported), calls on the other masters never do; records written
#     before the kill are read on the promoted replica.
#
# Plain Test::More: many clients, a cluster reshaped between requests and
# two nginx instances are outside the Test::Nginx format.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(sleep time);
use POSIX ();
use lib 't/lib';
use RedisCluster;
use IdemGateway;
use IdemWait qw(wait_for);

my $backend = $ENV{TEST_NGINX_BACKEND_PORT}
    or plan skip_all => 'TEST_NGINX_BACKEND_PORT is not set (use make test)';
my $base = $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT} || 1984;
my ($gw_a, $gw_b) = ($base + 145, $base + 146);

END {
    local $?;
    IdemGateway::stop_all();
    RedisCluster::stop();
}

my @nodes = RedisCluster::create(1);
my @masters = @nodes[0 .. 2];
my $redis = "idem_redis cluster 127.0.0.1:$masters[0] 127.0.0.1:$masters[1]"
            . " connect_timeout=300ms timeout=500ms";

my %master_pid = map {
    $_ => IdemGateway::start($_, $redis, $backend,
                             durable => 'replicas=1 timeout=1s')
} $gw_a, $gw_b;

# each gateway's two workers have read the full map (their lines), rather
# than a fixed time a loaded machine may need more than
for my $gw ($gw_a, $gw_b) {
    ok(wait_for("the map read by both workers of :$gw", sub {
           my @read = IdemGateway::log_text($gw)
               =~ /map from "[^"]*": 16384 slots on 3 masters\b/g;
           return @read >= 2;
       }), "both workers of :$gw read the map");
}

my $n = 0;
sub fresh_id { my ($tag) = @_; return "t145-$$-$tag-" . $n++ }

# a fresh id whose slot is $slot, or is served by master $port
sub id_in_slot {
    my ($slot, $tag) = @_;
    while (1) {
        my $id = fresh_id($tag);
        return $id if IdemGateway::slot($id) == $slot;
    }
}

# the slot map read once (a master killed is not in the live one)
my $map = RedisCluster::slot_map();

sub id_on_master {
    my ($port, $tag) = @_;
    while (1) {
        my $id = fresh_id($tag);
        my $owner = $map->[IdemGateway::slot($id)];
        return $id if defined $owner && $owner == $port;
    }
}

sub call {
    my ($gw, $id, $body, $uri) = @_;
    return scalar IdemGateway::send_all(
        [$gw, IdemGateway::post($id, $body // 'x=1', $uri // '/q')]);
}

# A duplicate sent right after its original's answer may come before the
# owner's final write (it leaves within 1 ms, here through an ASK too):
# 409, in flight.  Sent again until it is not, for up to 3 s.
sub duplicate {
    my ($gw, $id, $uri) = @_;
    my $end = time + 3;
    while (1) {
        my $r = call($gw, $id, undef, $uri);
        return $r unless defined $r && $r->{status} == 409 && time < $end;
        sleep 0.05;
    }
}

sub status_of {
    my ($gw, $id) = @_;
    my $end = time + 5;
    while (1) {
        my $r = IdemGateway::send_all([$gw, IdemGateway::get("/_idem/calls/$id")]);
        return $r unless defined $r && $r->{status} == 200
                         && $r->{body} =~ /"state":"(?:RECEIVED|PROCESSING)"/
                         && time < $end;
        sleep 0.05;
    }
}

# ASKING first: a node importing the slot answers MOVED without it
sub has_key {
    my ($port, $id) = @_;
    my $out = `printf 'ASKING\nEXISTS idem:c:{$id}\n' | redis-cli -p $port`;
    return $out =~ /\AOK\n1\n?\z/;
}

sub replayed {
    my ($r) = @_;
    return defined $r && $r->{status} == 200
           && ($r->{h}{'idempotent-replayed'} // '') eq 'true';
}


# 1. a slot migrated mid-run: ASK, then MOVED

{
    my $src = $masters[0];
    my $dst = $masters[1];
    my $slot = (grep { RedisCluster::slot_owner($_) == $src }
                map { $_ * 97 } 0 .. 168)[3];
    my $src_id = RedisCluster::node_id($src);
    my $dst_id = RedisCluster::node_id($dst);

    my $old = id_in_slot($slot, 'old');
    ok(IdemGateway::is_original(call($gw_a, $old)),
       "slot $slot on :$src: a call is forwarded");
    ok(has_key($src, $old), 'its record is on the source');

    is(RedisCluster::cli($dst, 'cluster', 'setslot', $slot, 'importing',
                         $src_id), 'OK', "slot $slot importing on :$dst");
    is(RedisCluster::cli($src, 'cluster', 'setslot', $slot, 'migrating',
                         $dst_id), 'OK', "slot $slot migrating on :$src");

    # ASK: a new key of the slot goes to the target
    my $new = id_in_slot($slot, 'new');
    my @r = (call($gw_a, $new), duplicate($gw_b, $new));
    ok(IdemGateway::is_original($r[0]) && replayed($r[1]),
       'migrating: a new id is claimed, its duplicate on the other gateway '
       . 'replayed') or diag(IdemGateway::summary(@r));
    ok(has_key($dst, $new) && !has_key($src, $new),
       'its record is on the target (ASK), not on the source');
    like(status_of($gw_b, $new)->{body}, qr/"state":"SUCCESS"/,
         'its status is read through ASK');
    like(status_of($gw_a, $old)->{body}, qr/"state":"SUCCESS"/,
         'the old id is still read on the source');

    # a durable claim through ASK: WAIT goes where the claim was taken
    my $dur = id_in_slot($slot, 'durable');
    @r = (call($gw_a, $dur, undef, '/w'), duplicate($gw_b, $dur, '/w'));
    ok(IdemGateway::is_original($r[0]) && replayed($r[1]),
       'migrating: a durable claim is made on the target and confirmed, '
       . 'its duplicate replayed') or diag(IdemGateway::summary(@r));
    ok(has_key($dst, $dur) && !has_key($src, $dur),
       'its record is on the target');
    like(IdemGateway::log_text($gw_a),
         qr/idem redis: WAIT 1 1000 on "127\.0\.0\.1:$dst"/,
         'its WAIT was sent to the target');

    # the old keys move: the source answers ASK for them too
    my @keys = split /\n/, RedisCluster::cli($src, 'cluster',
                                             'getkeysinslot', $slot, 100);
    is(RedisCluster::cli($src, 'migrate', '127.0.0.1', $dst, '', 0, 5000,
                         'keys', @keys), 'OK',
       scalar(@keys) . ' keys migrated');
    ok(has_key($dst, $old), 'the old record is on the target now');
    ok(replayed(call($gw_a, $old)) && replayed(call($gw_b, $old)),
       'its duplicates are replayed from the target');

    # MOVED: the slot belongs to the target
    for my $port (@masters) {
        RedisCluster::cli($port, 'cluster', 'setslot', $slot, 'node',
                          $dst_id);
    }
    RedisCluster::wait_ok(\@nodes);
    is(RedisCluster::slot_owner($slot), $dst, "slot $slot is on :$dst");
    $map = RedisCluster::slot_map();

    # durable claims first, so that a stale map meets MOVED with them
    my @dur = map { id_in_slot($slot, "durable-$_") } 0 .. 3;
    @r = map { call($_ % 2 ? $gw_b : $gw_a, $dur[$_], undef, '/w') } 0 .. 3;
    is(scalar(grep { IdemGateway::is_original($_) } @r), 4,
       'after the move: durable claims are made and confirmed on both '
       . 'gateways') or diag(IdemGateway::summary(@r));
    is(scalar(grep { has_key($dst, $_) } @dur), 4, 'on the target');

    my $after = id_in_slot($slot, 'after');
    ok(IdemGateway::is_original(call($gw_a, $after))
       && IdemGateway::is_original(call($gw_b, id_in_slot($slot, 'b'))),
       'after the move: new ids are claimed on both gateways');
    ok(has_key($dst, $after), 'on the target');
    for my $id ($old, $new, $after) {
        like(status_of($gw_a, $id)->{body}, qr/"state":"SUCCESS"/,
             "$id: SUCCESS after the move");
    }

    my $log = IdemGateway::log_text($gw_a) . IdemGateway::log_text($gw_b);
    like($log, qr/idem redis cluster: ASK slot $slot to 127\.0\.0\.1:$dst/,
         'the gateways followed ASK');
    like($log, qr/idem redis cluster: MOVED slot $slot to 127\.0\.0\.1:$dst/,
         'and MOVED');
    like($log, qr/ (\d+)#\d+: idem redis cluster: MOVED slot $slot .*\n(?:.*\n)*?.* \1#\d+: idem redis cluster: CLUSTER SLOTS to/,
         'and the worker that met MOVED read the map again');

    my @bad = (IdemGateway::bad_lines($gw_a), IdemGateway::bad_lines($gw_b));
    is(scalar @bad, 0, 'no error logged during the migration')
        or diag(join "\n", @bad[0 .. ($#bad < 4 ? $#bad : 4)]);
}


# 2. two gateways, 50 concurrent duplicates of each id, all masters

{
    my @ids = map { id_on_master($masters[$_ % 3], "dup") } 0 .. 5;
    my ($ok, $runs, @bad) = (0, 0);

    for my $id (@ids) {
        my $body = qq({"id":"$id"});
        my @res = IdemGateway::send_all(
            map { [$_ % 2 ? $gw_a : $gw_b, IdemGateway::post($id, $body)] }
            1 .. 50);
        my $ran = IdemGateway::backend_runs($backend, $id);
        $runs += $ran;
        my @orig = grep { IdemGateway::is_original($_) } @res;
        my @dups = grep { IdemGateway::is_duplicate($_) } @res;
        if ($ran == 1 && @orig == 1 && @dups == 49) {
            $ok++;
        } else {
            push @bad, "$id: backend ran $ran times, "
                       . IdemGateway::summary(@res);
        }
    }

    is($ok, 6, 'two gateways, 50 concurrent duplicates of 6 ids: one '
               . 'original and 49 duplicates each') or diag(join "\n", @bad);
    is($runs, 6, 'one execution per id');
}


# 2b. a reload (HUP) while calls wait on the backend: the old workers
#     finish them, their final writes reach every master

{
    my @ids = map { id_on_master($masters[$_ % 3], 'hup') } 0 .. 11;
    my $child = fork;
    die "fork: $!" unless defined $child;
    if (!$child) {
        # once the calls wait on the backend, not after a fixed time
        wait_for('a call at the backend',
                 sub { grep { IdemGateway::backend_runs($backend, $_) } @ids });
        kill 'HUP', $master_pid{$gw_a};
        POSIX::_exit(0);
    }
    my @res = IdemGateway::send_all(
        map { [$gw_a, IdemGateway::post($_, qq({"id":"$_"}))] } @ids);
    waitpid $child, 0;

    is(scalar(grep { IdemGateway::is_original($_) } @res), 12,
       'a reload with 12 calls in flight: every one answered')
        or diag(IdemGateway::summary(@res));
    sleep 0.5;
    my @done = grep { status_of($gw_b, $_)->{body} =~ /"state":"SUCCESS"/ }
               @ids;
    is(scalar @done, 12, 'their records say SUCCESS, on all 3 masters');
    like(IdemGateway::log_text($gw_a), qr/signal 1 \(SIGHUP\) received/,
         'the gateway was reloaded');
}


# 2c. a master paused (SIGSTOP, shorter than the node timeout): calls on
#     its slots get 503 once their timeout passes, calls on the others are
#     served; resumed, it serves again

{
    my $paused = $masters[1];
    my $pid = RedisCluster::pid($paused);
    kill 'STOP', $pid;
    my $t0 = time;
    my $r = call($gw_a, id_on_master($paused, 'stop'));
    my $took = time - $t0;
    my $o = call($gw_a, id_on_master($masters[0], 'run'));
    kill 'CONT', $pid;

    # well under the client's 10 s, which a call that waited for the
    # master to come back would reach; not a tight bound on a slow machine
    ok(defined $r && $r->{status} == 503 && $took < 3,
       sprintf('paused master: 503 after %.2f s (timeout 500ms)', $took))
        or diag(IdemGateway::summary($r));
    ok(IdemGateway::is_original($o), 'another master serves meanwhile');
    ok(wait_for('the resumed master serving',
                sub { IdemGateway::is_original(
                          call($gw_a, id_on_master($paused, 'cont'))) }),
       'resumed, it serves again');
}


# 3. a master killed, its replica promoted

{
    my $victim = $masters[2];
    my $other = $masters[0];
    my $before = id_on_master($victim, 'pre');
    ok(IdemGateway::is_original(call($gw_a, $before)),
       "a call on :$victim before the kill");
    RedisCluster::cli($victim, 'wait', 1, 1000);

    my $t0 = time;
    RedisCluster::kill_node($victim, 'KILL');

    my ($calls, $failed, $other_failed, $ok_run, $first_ok) = (0, 0, 0, 0);
    while (time - $t0 < 20 && $ok_run < 10) {
        my $r = call($gw_a, id_on_master($victim, 'fo'));
        my $o = call($gw_b, id_on_master($other, 'ot'));
        $calls++;
        unless (IdemGateway::is_original($o)) {
            $other_failed++;
            diag('another master\'s call: ' . IdemGateway::summary($o));
        }
        if (IdemGateway::is_original($r)) {
            $first_ok //= time - $t0;
            $ok_run++;
        } else {
            $failed++ if defined $r && $r->{status} == 503;
            $ok_run = 0;
        }
        sleep 0.05;
    }

    ok($ok_run >= 10, 'the killed master\'s slots are served again');
    is($other_failed, 0, 'calls on the other masters never failed');
    ok($failed > 0, 'calls on the killed master\'s slots got 503 meanwhile');
    diag(sprintf 'failover: %d of %d calls on the killed master\'s slots '
                 . 'got 503; served again %.1f s after the kill '
                 . '(cluster-node-timeout 1 s)',
         $failed, $calls, $first_ok // -1);

    # The other gateway sent nothing to the killed master's slots: its
    # workers' maps may still name it (a worker reads the map once a
    # second while a slot has no master up, and at once when a command
    # meets one that is down).  A client told 503 and Retry-After: 1
    # reads again.
    my ($read, $tries) = (undef, 0);
    my $end = time + 5;
    while (1) {
        $read = status_of($gw_b, $before);
        $tries++;
        last unless $read->{status} == 503 && time < $end;
        sleep 0.2;
    }
    like($read->{body}, qr/"state":"SUCCESS"/,
         'a record written before the kill is read on the promoted replica')
        or diag("after $tries reads");
    ok(replayed(call($gw_b, $before)), 'and its duplicate is replayed');
}

IdemGateway::stop_all();

for my $gw ($gw_a, $gw_b) {
    my @bad = IdemGateway::bad_lines($gw,
                  qr/idem: redis "(?:127\.0\.0\.1:\d+|cluster)": (?:connect|connection lost|since the last report)/);
    is(scalar @bad, 0, "gateway :$gw: nothing logged but the lost master")
        or diag(join "\n", @bad[0 .. ($#bad < 4 ? $#bad : 4)]);
    my $log = IdemGateway::log_text($gw);
    unlike($log, qr/\[(?:alert|crit|emerg)\]|exited on signal/,
           "gateway :$gw: no alert, no crash");
}

done_testing();
