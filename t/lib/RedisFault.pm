package RedisFault;

# A redis-server of the tests' own, to stop, pause and restart for real
# (t/080-redis-faults.t). Its port is TEST_NGINX_REDIS_FAULT_PORT.

use strict;
use warnings;
use Time::HiRes qw(sleep);
use File::Path qw(make_path);
use Cwd qw(abs_path);

my $port = $ENV{TEST_NGINX_REDIS_FAULT_PORT}
    or die "TEST_NGINX_REDIS_FAULT_PORT is not set\n";
my $dir = abs_path(__FILE__ =~ m{^(.*)/lib/} ? $1 : 't')
          . "/servroot-redis-$port";

sub pid {
    open my $fh, '<', "$dir/redis.pid" or return;
    my $pid = <$fh>;
    chomp $pid if defined $pid;
    return unless $pid && kill(0, $pid);

    # a pid file left by an earlier run may name a process that is no
    # longer this redis-server: never signal anything but it
    open my $cmd, '<', "/proc/$pid/cmdline" or return;
    my $line = <$cmd> // '';
    return $line =~ /redis/ && $line =~ /\b$port\b/ ? $pid : undef;
}

sub ping {
    my $out = `redis-cli -p $port ping 2>/dev/null`;
    return defined $out && $out =~ /PONG/;
}

sub start {
    return if pid();
    make_path($dir);
    system("redis-server --bind 127.0.0.1 --port $port --save '' "
           . "--appendonly no --dir $dir --daemonize yes "
           . "--pidfile $dir/redis.pid --logfile $dir/redis.log") == 0
        or die "cannot start redis-server on $port\n";
    for (1 .. 50) {
        return if ping();
        sleep 0.1;
    }
    die "redis-server on $port does not answer\n";
}

sub stop {
    my $pid = pid() or return;
    kill 'CONT', $pid;
    kill 'TERM', $pid;
    for (1 .. 50) {
        return unless kill 0, $pid;
        sleep 0.1;
    }
    kill 'KILL', $pid;
}

sub pause  { my $pid = pid() or die "no redis to pause\n"; kill 'STOP', $pid }
sub resume { my $pid = pid() or die "no redis to resume\n"; kill 'CONT', $pid }

1;
