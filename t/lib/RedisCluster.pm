package RedisCluster;

# A real local Redis Cluster for the tests (t/180-redis-cluster.t): 3
# masters and, on request, a replica each, on loopback ports from
# TEST_NGINX_REDIS_CLUSTER_PORT (cluster bus: port + 100), created with
# redis-cli --cluster create.  Nodes are killed, restarted and slots moved
# for real.

use strict;
use warnings;
use Time::HiRes qw(sleep time);
use File::Path qw(make_path remove_tree);
use Cwd qw(abs_path);

my $base = $ENV{TEST_NGINX_REDIS_CLUSTER_PORT}
    || ($ENV{TEST_NGINX_REDIS_PORT} || 16379) + 300;
my $root = abs_path(__FILE__ =~ m{^(.*)/lib/} ? $1 : 't');

sub base { $base }
sub dir  { "$root/servroot-cluster-$_[0]" }

# set (before create) for a cluster that announces host names, not IPs
# (Redis 7: cluster-announce-hostname, cluster-preferred-endpoint-type
# hostname): the node on a port is hostname(port), which a test maps to
# 127.0.0.1 (t/lib/IdemDns.pm)
our $Hostnames;

sub hostname { "node-$_[0].cluster.idem.test" }

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

sub start_node {
    my ($port, $fresh) = @_;
    my $d = dir($port);
    remove_tree($d) if $fresh;
    make_path($d);
    system("redis-server --bind 127.0.0.1 --port $port"
           . " --cluster-enabled yes --cluster-port " . ($port + 100)
           . " --cluster-config-file nodes.conf --cluster-node-timeout 1000"
           . " --cluster-require-full-coverage no"
           . " --save '' --appendonly no --dir $d --daemonize yes"
           . " --maxmemory-policy noeviction --repl-diskless-sync-delay 0"
           . " --pidfile $d/redis.pid --logfile $d/redis.log"
           . ($Hostnames ? " --cluster-announce-hostname " . hostname($port)
                           . " --cluster-preferred-endpoint-type hostname"
                         : "")) == 0
        or die "cannot start redis-server on $port\n";
    for (1 .. 50) {
        return if cli($port, 'ping') eq 'PONG';
        sleep 0.1;
    }
    die "redis-server on $port does not answer\n";
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

# 3 masters (ports base .. base+2), with $replicas (0 or 1) each after them
sub create {
    my ($replicas) = @_;
    $replicas ||= 0;
    my @ports = map { $base + $_ } 0 .. (3 * (1 + $replicas) - 1);
    stop();
    start_node($_, 1) for @ports;
    my $nodes = join ' ', map { "127.0.0.1:$_" } @ports;
    my $out = `redis-cli --cluster create $nodes --cluster-replicas $replicas --cluster-yes 2>&1`;
    $? == 0 or die "redis-cli --cluster create failed:\n$out\n";
    wait_ok(\@ports);
    return @ports;
}

# every node says cluster_state:ok and agrees on the slots
sub wait_ok {
    my ($ports, $timeout) = @_;
    my $until = time + ($timeout || 20);
    while (time < $until) {
        my $ok = grep { cli($_, 'cluster', 'info') =~ /cluster_state:ok/ }
                 @$ports;
        return 1 if $ok == @$ports
                    && `redis-cli --cluster check 127.0.0.1:$ports->[0] 2>&1`
                       =~ /All 16384 slots covered/
                    && (!$Hostnames || names_known($ports));
        sleep 0.2;
    }
    die "the cluster is not ok after its timeout\n";
}

# every node's map names every master by its host name (gossip spreads them)
sub names_known {
    my ($ports) = @_;
    my @masters = grep { cli($_, 'role') =~ /\Amaster/ } @$ports;
    for my $p (@$ports) {
        my $slots = cli($p, 'cluster', 'slots');
        for my $m (@masters) {
            my $name = hostname($m);
            return 0 unless $slots =~ /^\Q$name\E$/m;
        }
    }
    return 1;
}

sub node_id { cli($_[0], 'cluster', 'myid') }

# the port of the master serving a slot
sub slot_owner {
    my ($slot) = @_;
    for my $line (split /\n/, cli($base, 'cluster', 'nodes')) {
        my @f = split ' ', $line;
        next unless $f[2] =~ /master/ && $f[2] !~ /fail/;
        for my $range (@f[8 .. $#f]) {
            next if $range =~ /^\[/;
            my ($a, $b) = split /-/, $range;
            $b = $a unless defined $b;
            return ($f[1] =~ /:(\d+)/)[0] if $slot >= $a && $slot <= $b;
        }
    }
    return;
}

# slot => port of its master, as a node sees it now (a reference)
sub slot_map {
    my ($port) = @_;
    my @map;
    my @lines = split /\n/, cli($port || $base, 'cluster', 'slots');
    # redis-cli prints the nested reply flat: start, end, ip, port, id, ...
    my $i = 0;
    while ($i + 3 < @lines) {
        my ($a, $b, $ip, $p) = @lines[$i .. $i + 3];
        if ($a =~ /^\d+$/ && $b =~ /^\d+$/ && $p =~ /^\d+$/ && $ip =~ /\./) {
            @map[$a .. $b] = ($p) x ($b - $a + 1);
            $i += 4;
        } else {
            $i++;
        }
    }
    return \@map;
}

sub stop {
    for my $p (0 .. 9) {
        my $port = $base + $p;
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
