package RedisSentinel;

# A real local Redis with Sentinel for the tests (t/190, t/195): a master,
# a replica and 3 sentinels watching them as "mymaster" (quorum 2, down
# after 2 s: a sentinel pings every second, so a new link, right after a
# switch, may wait most of a second for its first answer; with 1 s a
# loaded machine saw the new master down and failed over again), on
# loopback ports from TEST_NGINX_REDIS_SENTINEL_PORT: master base,
# replica base + 1, sentinels base + 10 .. base + 12.
#
# start(hostnames => 1): the sentinels resolve and announce host names
# ("sentinel resolve-hostnames yes", "announce-hostnames yes"), monitor the
# master as "localhost", and every Redis announces itself as a replica by
# that name (replica-announce-ip): a sentinel names each master by it, in
# its answers and in +switch-master (t/198).  "localhost", as the
# sentinels resolve with the system's resolver; nginx's asks the tests'
# DNS server (t/lib/IdemDns.pm), which maps it.

use strict;
use warnings;
use Time::HiRes qw(sleep time);
use File::Path qw(make_path remove_tree);
use Cwd qw(abs_path);

my $base = $ENV{TEST_NGINX_REDIS_SENTINEL_PORT}
    || ($ENV{TEST_NGINX_REDIS_PORT} || 16379) + 400;
my $root = abs_path(__FILE__ =~ m{^(.*)/lib/} ? $1 : 't');

# start(hostnames => 1)
my $hostnames = 0;

sub base      { $base }
sub master    { $base }
sub replica   { $base + 1 }
# a second replica, started by start(replicas => 2) only (bench/chaos.pl)
sub replica2  { $base + 2 }
sub sentinels { map { $base + 10 + $_ } 0 .. 2 }
sub dir       { "$root/servroot-sentinel-$_[0]" }

sub cli {
    my ($port, @args) = @_;
    my $cmd = join ' ', "redis-cli -p $port",
                        map { length $_ ? quotemeta $_ : "''" } @args;
    my $out = `$cmd 2>&1`;
    chomp $out;
    return $out;
}

sub pid {
    my ($port) = @_;
    open my $fh, '<', dir($port) . "/redis.pid" or return;
    my $pid = <$fh>;
    chomp $pid if defined $pid;
    return unless $pid && kill(0, $pid);

    # a pid file left by an earlier run may name a process that is no
    # longer this redis-server: never signal anything but it
    open my $cmd, '<', "/proc/$pid/cmdline" or return;
    my $line = <$cmd> // '';
    return $line =~ /redis/ && $line =~ /\b$port\b/ ? $pid : undef;
}

# until the server on $port answers, for up to 20 s (a loaded machine may
# take seconds to start one); dies with the end of its log if it does not
sub wait_ping {
    my ($port) = @_;
    my $until = time + 20;
    while (time < $until) {
        return if cli($port, 'ping') eq 'PONG';
        sleep 0.1;
    }
    my $log = '';
    if (open my $fh, '<', dir($port) . '/redis.log') {
        my @lines = <$fh>;
        $log = join '', @lines[($#lines > 4 ? $#lines - 4 : 0) .. $#lines];
    }
    die "redis on $port does not answer\n$log";
}

sub start_redis {
    my ($port, $replicaof) = @_;
    my $d = dir($port);
    make_path($d);
    system("redis-server --bind 127.0.0.1 --port $port --save ''"
           . " --appendonly no --dir $d --daemonize yes"
           . " --maxmemory-policy noeviction --repl-diskless-sync-delay 0"
           . ($replicaof ? " --replicaof 127.0.0.1 $replicaof" : '')
           . ($hostnames ? ' --replica-announce-ip localhost' : '')
           . " --pidfile $d/redis.pid --logfile $d/redis.log") == 0
        or die "cannot start redis-server on $port\n";
    wait_ping($port);
}

sub start_sentinel {
    my ($port) = @_;
    my $d = dir($port);
    remove_tree($d);
    make_path($d);
    my $names = $hostnames ? "sentinel resolve-hostnames yes\n"
                             . "sentinel announce-hostnames yes\n" : '';
    my $host = $hostnames ? 'localhost' : '127.0.0.1';
    open my $fh, '>', "$d/sentinel.conf" or die "$d/sentinel.conf: $!";
    print $fh <<"CONF";
bind 127.0.0.1
port $port
daemonize yes
pidfile $d/redis.pid
logfile $d/redis.log
dir $d
${names}sentinel monitor mymaster $host $base 2
sentinel down-after-milliseconds mymaster 2000
sentinel failover-timeout mymaster 3000
sentinel parallel-syncs mymaster 1
CONF
    close $fh;
    system("redis-server $d/sentinel.conf --sentinel") == 0
        or die "cannot start redis-sentinel on $port\n";
    wait_ping($port);
}

# start(replicas => 2): a second replica too (default: one);
# start(hostnames => 1): names, above
sub start {
    my (%opt) = @_;
    $hostnames = $opt{hostnames} ? 1 : 0;
    my @replicas = ($opt{replicas} // 1) > 1 ? (replica(), replica2())
                                              : (replica());
    stop();
    remove_tree(dir($_)) for master(), @replicas;
    start_redis(master());
    start_redis($_, master()) for @replicas;
    my $until = time + 20;
    while (time < $until) {
        last unless grep { cli($_, 'info', 'replication')
                           !~ /master_link_status:up/ } @replicas;
        sleep 0.1;
    }
    my $n = @replicas;
    start_sentinel($_) for sentinels();
    # the sentinels have found the replica and each other
    $until = time + 20;
    while (time < $until) {
        my $ok = grep {
            my $m = cli($_, 'sentinel', 'master', 'mymaster');
            $m =~ /num-slaves\n$n\n/ && $m =~ /num-other-sentinels\n2\n/
        } sentinels();
        return if $ok == 3;
        sleep 0.2;
    }
    die "the sentinels do not see the replica and each other\n";
}

# the master's port as the sentinels say
sub master_port {
    my @a = split /\n/, cli((sentinels())[0], 'sentinel',
                            'get-master-addr-by-name', 'mymaster');
    return $a[1];
}

# "SENTINEL MASTER mymaster" of one sentinel, as a hash
sub master_info {
    my ($port) = @_;
    my @a = split /\n/, cli($port, 'sentinel', 'master', 'mymaster');
    return @a % 2 ? () : @a;
}

# every sentinel names $port as the master and none is failing over (the
# old master may still say it is one: a sentinel converts it to a replica
# only some seconds after the failover)
sub agreed {
    my ($port) = @_;
    for my $s (sentinels()) {
        my %m = master_info($s);
        return 0 unless ($m{port} // '') eq $port
                        && ($m{flags} // '') eq 'master';
    }
    return 1;
}

# agreed($port), and each sentinel sees one replica, up and replicating
# from it: nothing will move the master by itself now (a failover started
# meanwhile could undo another)
sub settled {
    my ($port) = @_;
    return 0 unless agreed($port);
    for my $s (sentinels()) {
        my %m = master_info($s);
        my $r = cli($s, 'sentinel', 'replicas', 'mymaster');
        return 0 unless ($m{'num-slaves'} // '') eq '1'
                        && $r =~ /\nflags\nslave\n/
                        && $r =~ /\nmaster-link-status\nok\n/
                        && $r =~ /\nmaster-port\n$port\n/;
    }
    return 1;
}

# a write on $port (of $key: a cluster node takes its own slots' only) is
# acknowledged by a replica within 500 ms: WAIT counts it (a replica that
# has just synced acknowledges only once its first REPLCONF ACK is in, up
# to a second later); also used by t/197 on cluster nodes
sub replicated {
    my ($port, $key) = @_;
    $key //= 'idem-test:probe';
    my $cmd = "printf 'SET %s 1\\r\\nWAIT 1 500\\r\\n' \Q$key\E"
              . " | redis-cli -p $port 2>&1";
    return `$cmd` =~ /^1$/m;
}

# the first true value $check returns within $secs (polled), or undef
sub wait_until {
    my ($secs, $check) = @_;
    my $until = time + $secs;
    while (time < $until) {
        my $v = $check->();
        return $v if $v;
        sleep 0.2;
    }
    return;
}

# what the sentinels decided, from their logs: for a failure's diag
sub events {
    my @lines;
    for my $s (sentinels()) {
        open my $fh, '<', dir($s) . '/redis.log' or next;
        push @lines, map { "$s: $_" }
            grep { /epoch|switch-master|user requested|failover|convert|
                    fix-slave|odown|elected|config-update/x } <$fh>;
    }
    chomp @lines;
    return @lines;
}

sub kill_node {
    my ($port, $sig) = @_;
    my $pid = pid($port) or return;
    kill $sig || 'KILL', $pid;
    for (1 .. 50) {
        return unless kill 0, $pid;
        sleep 0.1;
    }
}

sub stop {
    for my $port (master(), replica(), replica2(), sentinels()) {
        my $pid = pid($port) or next;
        kill 'CONT', $pid;
        kill 'KILL', $pid;
        for (1 .. 50) {
            last unless kill 0, $pid;
            sleep 0.1;
        }
    }
}

1;
