package IdemFailover;

# Issue 27's four steps, for t/196 (Sentinel) and t/197 (Cluster):
#
#  1. a replica's link to its master is cut;
#  2. a call is sent;
#  3. the master is killed and the replica promoted;
#  4. the same call id is sent again.
#
# new(gw => port, backend => port, tag => id prefix, where => what the
# promoted replica is called, cut => sub, fail_over => sub, replica_back
# => sub, fresh => sub): the test says how to do steps 1 and 3, how to
# give the promoted replica a replica of its own, and (fresh, optional)
# how to make a new call id on the part of the store that failed over.
# The gateway is one of IdemGateway::start with durable => 'replicas=1
# timeout=500ms': /q is a plain dedupe route, /w a durable one.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(sleep time);
use POSIX ();
use IdemGateway;
use RedisSentinel ();

sub new {
    my ($class, %s) = @_;
    return bless { %s, n => 0 }, $class;
}

sub call {
    my ($s, $uri, $id) = @_;
    return scalar IdemGateway::send_all([$s->{gw},
                                         IdemGateway::post($id, 'amount=10',
                                                           $uri)]);
}

sub runs {
    my ($s, $id) = @_;
    return IdemGateway::backend_runs($s->{backend}, $id);
}

# without idem_dedupe_durable: the claim is lost with the master, the
# call runs twice
sub twice {
    my ($s, $id) = @_;

    $s->{cut}->();
    my $r = $s->call('/q', $id);
    ok(IdemGateway::is_original($r), 'step 2: the call is served')
        or diag(IdemGateway::summary($r));

    $s->{fail_over}->();

    $r = $s->call('/q', $id);
    ok(IdemGateway::is_original($r),
       "step 4: $s->{where} never heard of the id: served again")
        or diag(IdemGateway::summary($r));
    is($s->runs($id), 2, 'without idem_dedupe_durable the call ran twice');
}

# with it: $id is refused while no replica confirms its claim and runs
# once when sent again; $before, confirmed before the cut, never again
sub once {
    my ($s, $before, $id) = @_;

    my $t0 = time;
    my $r = $s->call('/w', $before);
    my $took = time - $t0;
    ok(IdemGateway::is_original($r), 'a durable call with the replica up')
        or diag(IdemGateway::summary($r));
    diag(sprintf 'a durable call, the replica confirming: %.1f ms',
         $took * 1000);

    $s->{cut}->();

    my ($status, $waited, $type) = $s->refused($id);
    is($status, '503', 'step 2: the call is refused: no replica confirms '
                       . 'its claim');
    is($type, 'claim-not-durable', 'as claim-not-durable');
    ok($waited >= 0.45 && $waited < 1.5, 'within its timeout (500 ms)')
        or diag("it took $waited s");
    is($s->runs($id), 0, 'it was not forwarded');

    $s->{fail_over}->();
    $s->{replica_back}->($id);
    $s->durable_again();

    $r = $s->call('/w', $id);
    ok(IdemGateway::is_original($r), 'step 4: the refused id is served')
        or diag(IdemGateway::summary($r) . ' ' . ($r ? $r->{body} : ''));
    $r = $s->call('/w', $id);
    ok(IdemGateway::is_duplicate($r), 'and its duplicate is not')
        or diag(IdemGateway::summary($r));
    is($s->runs($id), 1, 'with idem_dedupe_durable the call ran once');

    $r = $s->call('/w', $before);
    ok(!IdemGateway::is_original($r)
       && $r && ($r->{status} == 200 || $r->{status} == 409),
       "the call confirmed before the cut is known on $s->{where}")
        or diag(IdemGateway::summary($r));
    is($s->runs($before), 1, 'and ran once');
}

# After a failover each worker finds the new master on its own (its map,
# its connection for durable claims): until then its first durable call
# is refused (503, nothing forwarded).  Step 4 waits until the durable
# route serves again, as a client would retry: two rounds of eight calls
# at once (both workers), all served.
sub durable_again {
    my ($s) = @_;
    my $rounds = 0;

    ok(RedisSentinel::wait_until(15, sub {
           my @r = IdemGateway::send_all(map {
               [$s->{gw}, IdemGateway::post($s->fresh_id, 'amount=10',
                                            '/w')]
           } 1 .. 8);
           $rounds = (8 == grep { IdemGateway::is_original($_) } @r)
                     ? $rounds + 1 : 0;
           return $rounds == 2;
       }), 'the durable route serves calls again');
}

# an id of the store's part that failed over (the test's own, or any)
sub fresh_id {
    my ($s) = @_;
    return $s->{fresh}->() if $s->{fresh};
    return "$s->{tag}-again-$$-" . $s->{n}++;
}

# step 2 on the durable route, from a child: its status, how long it took
# and its problem type; calls on the plain route meanwhile (on both
# workers) are not held up by its WAIT
sub refused {
    my ($s, $id) = @_;

    pipe my $rd, my $wr or die "pipe: $!";
    my $pid = fork // die "fork: $!";

    if ($pid == 0) {
        close $rd;
        my $t = time;
        my $c = $s->call('/w', $id);
        my ($type) = $c ? $c->{body} =~ /problem:([a-z-]+)/ : ();
        printf $wr "%s %.3f %s\n", $c ? $c->{status} : 'none', time - $t,
               $type // '-';
        close $wr;

        # not through END: the parent's Redis and gateway stay up
        POSIX::_exit(0);
    }

    close $wr;
    sleep 0.1;

    my ($slowest, $served) = (0, 0);
    for my $k (1 .. 8) {
        my $t = time;
        my $q = $s->call('/q', "$s->{tag}-meanwhile-$$-" . $s->{n}++);
        $slowest = time - $t if time - $t > $slowest;
        $served++ if IdemGateway::is_original($q);
    }

    waitpid $pid, 0;
    my @child = split ' ', scalar(<$rd>) // 'none 0 -';

    is($served, 8, 'the plain route serves calls meanwhile');
    ok($slowest < 0.25, 'none of them waits for the WAIT')
        or diag(sprintf 'the slowest took %.0f ms', $slowest * 1000);
    diag(sprintf 'plain calls during a WAIT of 500 ms: the slowest took '
                 . '%.1f ms', $slowest * 1000);

    return @child;
}

# once the gateway is stopped: nothing logged but the lines of the lost
# master ($mode: how the log names the store), no alert, no crash
sub log_ok {
    my ($s, $mode) = @_;

    IdemGateway::stop_all();

    my @bad = IdemGateway::bad_lines($s->{gw},
        qr/idem: redis "(?:127\.0\.0\.1:\d+|\Q$mode\E)": /
        . qr/(?:connect|connection lost|since the last report)/);
    is(scalar @bad, 0, 'nothing logged but the lost master')
        or diag(join "\n", @bad[0 .. ($#bad < 4 ? $#bad : 4)]);
    unlike(IdemGateway::log_text($s->{gw}),
           qr/\[(?:alert|crit|emerg)\]|exited on signal/,
           'no alert, no crash');
}

1;
