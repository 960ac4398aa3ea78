#!/usr/bin/perl
# idem_dedupe_wait, measured: how long after its owner's answer a waiting
# duplicate gets its own, on the owner's gateway and on another one, and
# what a waiting duplicate costs Redis.
#
#   bench/bench-wait.pl       (make bench runs it; make bench-wait alone)
#
# Starts a redis-server, the test backend (util/backend.pl) and two
# gateways (t/lib/IdemGateway.pm: a master and two workers each, /d with
# idem_dedupe_wait 5s to the backend's /sleep/MS/1) on loopback ports.  For
# each call id: the owner goes to gateway A, a duplicate follows it
# BENCH_WAIT_LAG ms later, to A ("same") or to B ("other"); the time from
# the owner's last byte to the duplicate's is one sample.  The owner's
# upstream takes BENCH_WAIT_SLEEP ms (default 300), so every duplicate
# waits.  Redis work: INFO commandstats around each series, the commands
# the duplicates' waits added (a series' calls less what the owners alone
# cost, from a series without duplicates) per duplicate.
#
# A report, not a test: exit 0 whatever it measures.
#
# Environment: BENCH_WAIT_CALLS (100 per series), BENCH_WAIT_SLEEP (300),
# BENCH_WAIT_LAG (ms, or "random": the default, a moment drawn in the
# owner's upstream time, from 20 ms to 20 ms before its end), BENCH_WAIT_PORT
# (first of 4 ports, 26100).
#
# Claim scripts a duplicate: EVALSHA/EVAL of a series less those of the
# owners alone; PUBLISH (the owners' wake, with idem_dedupe_wait) counts
# among the Redis commands.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib";
use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw(time sleep);
use File::Path qw(make_path remove_tree);

my $root = "$FindBin::Bin/..";
my $calls = $ENV{BENCH_WAIT_CALLS} || 100;
my $upsleep = $ENV{BENCH_WAIT_SLEEP} || 300;
my $lag = $ENV{BENCH_WAIT_LAG} // 'random';
my $base = $ENV{BENCH_WAIT_PORT} || 26100;
my ($redis, $backend, $gwa, $gwb) = map { $base + $_ } 0 .. 3;
my $dir = "$root/build/bench-wait";

$ENV{TEST_NGINX_BINARY} ||= $ENV{NGINX_BIN} || '/usr/sbin/nginx';
$ENV{TEST_NGINX_LOAD_MODULES} ||= "$root/build/ngx_http_idem_module.so";

require IdemGateway;

remove_tree($dir);
make_path($dir);

my @pids;

sub spawn {
    my $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>>', "$dir/spawned.log";
        open STDERR, '>&', \*STDOUT;
        exec(@_) or exit 1;
    }
    push @pids, $pid;
}

sub cli { my $o = `redis-cli -p $redis @_ 2>/dev/null`; chomp $o; return $o }

END {
    IdemGateway::stop_all();
    kill 'TERM', @pids if @pids;
}

spawn('redis-server', '--bind', '127.0.0.1', '--port', $redis, '--save', '',
      '--appendonly', 'no', '--dir', $dir);
spawn('perl', "$root/util/backend.pl", $backend, "$dir/backend");

for (1 .. 50) {
    last if cli('ping') eq 'PONG';
    sleep 0.1;
}

for my $port ($gwa, $gwb) {
    IdemGateway::start($port, "idem_redis 127.0.0.1:$redis", $backend,
                       sleep => $upsleep, wait => '5s', log => 'error');
}

# the owner to A at once, the duplicate (if any) to $dup_port $lag ms
# later; the seconds from the owner's last byte to the duplicate's
sub one {
    my ($id, $dup_port) = @_;
    my $req = IdemGateway::post($id, '{"amount":1}');
    my %sock;

    $sock{owner} = IO::Socket::INET->new("127.0.0.1:$gwa") or return;
    syswrite($sock{owner}, $req);

    my $sel = IO::Select->new($sock{owner});
    my (%buf, %end, %name);
    $name{$sock{owner}} = 'owner';
    my $ms = $lag eq 'random' ? 20 + rand(ngx_max($upsleep - 40, 1)) : $lag;
    my $dup_at = time + $ms / 1000;
    my $deadline = time + 10;

    while (time < $deadline) {
        if ($dup_port && !$sock{dup} && time >= $dup_at) {
            $sock{dup} = IO::Socket::INET->new("127.0.0.1:$dup_port")
                or return;
            syswrite($sock{dup}, $req);
            $sel->add($sock{dup});
            $name{$sock{dup}} = 'dup';
        }

        last if !$sel->count && (!$dup_port || $sock{dup});

        my $wait = $dup_port && !$sock{dup}
                   ? ngx_max($dup_at - time, 0.001) : 1;
        for my $s ($sel->can_read($wait)) {
            my $n = sysread($s, $buf{$name{$s}}, 65536,
                            length($buf{$name{$s}} // ''));
            next if $n;
            $end{$name{$s}} = time;
            $sel->remove($s);
            close $s;
        }
    }

    return undef unless $end{owner};
    return 0 unless $dup_port;
    return undef unless $end{dup}
        && ($buf{dup} // '') =~ /^Idempotent-Replayed: true\r$/mi;
    return $end{dup} - $end{owner};
}

sub ngx_max { $_[0] > $_[1] ? $_[0] : $_[1] }

sub stats {
    my %c;
    for (split /\r?\n/, cli('info commandstats')) {
        $c{$1} = $2 if /^cmdstat_(\w+):calls=(\d+)/;
    }
    return \%c;
}

sub series {
    my ($name, $dup_port) = @_;
    cli('config resetstat');
    my (@d, $lost);
    for my $i (1 .. $calls) {
        my $r = one("bw-$$-$name-$i", $dup_port);
        defined $r ? push(@d, $r) : $lost++;
    }
    my $c = stats();
    my $cmds = 0;
    $cmds += $c->{$_} // 0
        for qw(hsetnx evalsha eval hset pexpire set publish);
    return { d => [sort { $a <=> $b } @d], lost => $lost // 0,
             cmds => $cmds,
             scripts => ($c->{evalsha} // 0) + ($c->{eval} // 0),
             evalsha => $c->{evalsha} // 0,
             hsetnx => $c->{hsetnx} // 0 };
}

sub pct {
    my ($d, $p) = @_;
    return 'n/a' unless @$d;
    my $i = int($p / 100 * $#$d + 0.5);
    return sprintf '%.1f', 1000 * $d->[$i];
}

my $alone = series('alone', 0);
my $same = series('same', $gwa);
my $other = series('other', $gwb);

my @out;
push @out, sprintf "idem_dedupe_wait: %d calls a series, the owner's "
                   . "upstream %d ms, the duplicate %s after it",
                   $calls, $upsleep,
                   $lag eq 'random' ? "20-" . ngx_max($upsleep - 20, 21)
                                      . " ms (random)"
                                    : "$lag ms";
push @out, sprintf "%-8s %10s %10s %6s %16s %16s", 'series', 'p50 ms',
                   'p99 ms', 'lost', 'Redis cmds/dup', 'claim scripts/dup';

for my $s (['same', $same], ['other', $other]) {
    my $n = scalar @{ $s->[1]{d} } || 1;
    push @out, sprintf "%-8s %10s %10s %6d %16.1f %16.1f", $s->[0],
        pct($s->[1]{d}, 50), pct($s->[1]{d}, 99), $s->[1]{lost},
        ($s->[1]{cmds} - $alone->{cmds}) / $n,
        ($s->[1]{scripts} - $alone->{scripts}) / $n;
}

push @out, sprintf "(owners alone: %d Redis commands for %d calls; "
                   . "p50/p99: after the owner's answer)",
                   $alone->{cmds}, $calls;

print "$_\n" for @out;

open my $fh, '>', "$dir/result.txt" or die $!;
print $fh "$_\n" for @out;
close $fh;

exit 0;
