package IdemTestNginx::Env;

# What util/test.sh sets up, for a bare "prove t/010-call-id.t" or
# "prove -r t" from the top of the tree: .proverc loads this module into
# prove itself (-Mlib=t/compat -MIdemTestNginx::Env), before any test
# file runs, so every file inherits it, whichever Test::Nginx it uses.
#
# Under util/test.sh (TEST_NGINX_ROOT set) it does nothing.  Otherwise it
# fills in what is not set: TEST_NGINX_BINARY (/usr/sbin/nginx),
# TEST_NGINX_LOAD_MODULES (build/ngx_http_idem_module.so, or IDEM_MODULE,
# and the echo module), free ports for TEST_NGINX_PORT,
# TEST_NGINX_REDIS_PORT and TEST_NGINX_BACKEND_PORT (and the ports the
# files derive from them), and starts the private redis-server and
# util/backend.pl on them, stopped when prove ends.  A module not built,
# or a port given that is taken, is one line on stderr and exit status 2,
# before any test runs.

use strict;
use warnings;
use Cwd qw(abs_path);
use File::Path qw(make_path remove_tree);
use IO::Socket::INET;
use POSIX ();
use Time::HiRes qw(sleep);

my $root = abs_path(__FILE__ =~ m{^(.*)/t/compat/} ? $1 : '.');
my ($owner, @pids);

sub fail {
    print STDERR "prove: $_[0]\n";
    exit 2;
}

# nginx, redis-server and the backend bind with SO_REUSEADDR
sub tcp_free {
    my ($port) = @_;
    return 0 if $port < 1024 || $port > 65535;
    return IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                 LocalPort => $port, Listen => 1,
                                 ReuseAddr => 1) ? 1 : 0;
}

sub udp_free {
    return IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                 LocalPort => $_[0], Proto => 'udp')
           ? 1 : 0;
}

# a port whose derived ones (offsets) are free too; below the kernel's
# ephemeral range (32768), where no outgoing connection takes them
sub pick {
    my ($taken, $udp, @offsets) = @_;
    for (1 .. 200) {
        my $p = 20000 + 10 * int(rand 1200);
        next if grep { $taken->{$p + $_} } 0, @offsets;
        next unless tcp_free($p) && !grep { !tcp_free($p + $_) } @offsets;
        next if $udp && !udp_free($p);
        $taken->{$p + $_} = 1 for 0, @offsets;
        return $p;
    }
    fail("no free port found: set TEST_NGINX_PORT, TEST_NGINX_REDIS_PORT"
         . " and TEST_NGINX_BACKEND_PORT");
}

sub spawn {
    my (@cmd) = @_;
    my $pid = fork // fail("fork: $!");
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        exec @cmd or POSIX::_exit(127);
    }
    push @pids, $pid;
    return $pid;
}

sub answers {
    my ($port, $send, $expect) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 1) or return 0;
    return 1 unless defined $send;
    print $s $send;
    my $line = <$s> // '';
    return $line =~ $expect;
}

sub setup {
    return if $ENV{TEST_NGINX_ROOT};

    my $module = $ENV{IDEM_MODULE} || "$root/build/ngx_http_idem_module.so";
    if (!$ENV{TEST_NGINX_LOAD_MODULES}) {
        -f $module
            or fail("the module is not built ($module): run make, then"
                    . " prove again (or util/test.sh t/FILE.t)");
        $ENV{TEST_NGINX_LOAD_MODULES} =
            "$module /usr/lib/nginx/modules/ngx_http_echo_module.so";
    }
    $ENV{TEST_NGINX_BINARY} ||= '/usr/sbin/nginx';

    my %taken;
    my %given = map { $_ => $ENV{$_} }
                grep { $ENV{$_} } qw(TEST_NGINX_REDIS_PORT
                                     TEST_NGINX_BACKEND_PORT);
    # (976 .. 999: the harness's $TEST_NGINX_RAND_PORT_<n>)
    my $port = $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT}
               || pick(\%taken, 0, 1 .. 3, 75, 85, 90, 91, 100, 115, 120,
                       150, 176, 180 .. 184, 500, 501,
                       976 .. 999);
    my $redis = $ENV{TEST_NGINX_REDIS_PORT}
                || pick(\%taken, 0, 200, 300 .. 305, 400 .. 405, 450, 500,
                        520 .. 525, 620 .. 625);
    my $backend = $ENV{TEST_NGINX_BACKEND_PORT} || pick(\%taken, 1);

    for my $var (sort keys %given) {
        tcp_free($given{$var})
            or fail("$var=$given{$var} is in use: give another port, or"
                    . " leave it unset and a free one is taken");
    }

    $ENV{TEST_NGINX_PORT} = $port;
    $ENV{TEST_NGINX_SERVER_PORT} = $port;
    $ENV{TEST_NGINX_REDIS_PORT} = $redis;
    $ENV{TEST_NGINX_BACKEND_PORT} = $backend;
    $ENV{TEST_NGINX_REDIS_FAULT_PORT} ||= $redis + 200;
    $ENV{TEST_NGINX_ROOT} = $root;

    $owner = $$;

    my $dir = "$root/t/servroot-redis-$redis";
    remove_tree($dir);
    make_path($dir);
    spawn('redis-server', '--bind', '127.0.0.1', '--port', $redis,
          '--save', '', '--appendonly', 'no', '--dir', $dir,
          '--maxmemory-policy', 'noeviction',
          '--logfile', "$dir/redis.log", '--daemonize', 'no');

    my $bdir = "$root/t/servroot-backend-$backend";
    remove_tree($bdir);
    spawn($^X, "$root/util/backend.pl", $backend, $bdir);

    for (1 .. 100) {
        last if answers($redis, "PING\r\n", qr/^\+PONG/)
                && answers($backend);
        sleep 0.1;
    }
    answers($redis, "PING\r\n", qr/^\+PONG/)
        or fail("redis-server does not start on $redis: see $dir/redis.log");
    answers($backend) or fail("util/backend.pl does not start on $backend");

    print STDERR "prove: nginx port $port, redis-server $redis,"
                 . " backend $backend (set up by t/compat/IdemTestNginx/"
                 . "Env.pm)\n";

    for my $sig (qw(INT TERM HUP)) {
        $SIG{$sig} = sub { cleanup(); exit 1 };
    }
}

sub cleanup {
    return unless defined $owner && $owner == $$;
    undef $owner;

    # the Redis t/080 stops and restarts, if it is still that one
    my $fault = $ENV{TEST_NGINX_REDIS_FAULT_PORT};
    if (open my $fh, '<', "$root/t/servroot-redis-$fault/redis.pid") {
        my $pid = <$fh>;
        chomp $pid if defined $pid;
        if ($pid && open my $cmd, '<', "/proc/$pid/cmdline") {
            if ((<$cmd> // '') =~ /redis/) {
                kill 'CONT', $pid;
                kill 'TERM', $pid;
            }
        }
    }

    kill 'TERM', @pids;
    waitpid($_, 0) for @pids;
    @pids = ();
}

END {
    my $status = $?;
    cleanup();
    $? = $status;
}

sub import { setup() }

1;
