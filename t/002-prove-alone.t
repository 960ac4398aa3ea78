# A bare "prove FILE" from the top of the tree, with no TEST_NGINX_*
# variable: .proverc's t/compat/IdemTestNginx/Env.pm finds the built
# module, picks free ports and starts Redis and the backend, as
# util/test.sh does, and stops them when prove ends.  Without the module
# built, or with a given port taken, it is one line and exit status 2.

use strict;
use warnings;
use Test::More;
use IO::Socket::INET;
use Cwd qw(abs_path);

my $root = abs_path(__FILE__ =~ m{^(.*)/t/[^/]+$} ? $1 : '.');
chdir $root or die "$root: $!\n";

# prove as a newcomer runs it: none of util/test.sh's variables
sub bare_prove {
    my (%env) = @_;
    my $cmd = join ' ', 'env',
        (map { "-u $_" } grep { /^TEST_NGINX_|^IDEM_MODULE$/ } keys %ENV),
        (map { "$_=$env{$_}" } sort keys %env),
        'prove t/data/prove-alone.tt 2>&1';
    my $out = `$cmd`;
    return ($? >> 8, $out);
}

# what a bare prove loads: Debian's nginx and build/'s module (a suite
# run with another nginx or an ASan build may not have made it)
SKIP: {
    skip 'build/ngx_http_idem_module.so is not built (make)', 5
        unless -f "$root/build/ngx_http_idem_module.so";

    my ($status, $out) = bare_prove();
    is($status, 0, 'a bare prove passes') or diag($out);
    like($out, qr/^All tests successful\./m, 'its tests all pass');

    my ($redis, $backend) =
        $out =~ /^prove: nginx port \d+, redis-server (\d+), backend (\d+)/m;
    ok(defined $redis, 'it says the ports it took') or diag($out);
    skip 'no ports said', 2 unless defined $redis;
    ok(!IO::Socket::INET->new("127.0.0.1:$redis"),
       'its redis-server is stopped with prove');
    ok(!IO::Socket::INET->new("127.0.0.1:$backend"),
       'its backend is stopped with prove');
}

my ($status, $out) =
    bare_prove(IDEM_MODULE => "$root/t/no-such-module.so");
is($status, 2, 'the module not built: exit status 2');
is($out, "prove: the module is not built ($root/t/no-such-module.so):"
         . " run make, then prove again (or util/test.sh t/FILE.t)\n",
   'the module not built: one line saying what to run');

# a port given that is taken
my $taken = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Listen => 1)
    or die "listen: $!\n";
my $port = $taken->sockport;
# (the module named as loaded: the port is checked whether it is built
# or not, as with make test NGINX=..., which builds only its own)
($status, $out) = bare_prove(TEST_NGINX_REDIS_PORT => $port,
                             TEST_NGINX_LOAD_MODULES =>
                                 "$root/t/no-such-module.so");
is($status, 2, 'a given port taken: exit status 2');
like($out, qr/\Aprove: TEST_NGINX_REDIS_PORT=$port is in use[^\n]*\n\z/,
     'a given port taken: one line naming it');

# util/test.sh in one prove (TEST_JOBS=1), no port given: TEST_PORT_BASE
# moves all of its ports, as it moves the shards' (it used to be ignored,
# and the run took 1984, 16379 and 16380)
{
    my $base;
    for my $k (0 .. 40) {
        my $b = ($ENV{TEST_NGINX_SERVER_PORT} || 20000) + 300 + 7 * $k;
        next if $b + 1000 > 32768;
        next if grep { !IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                              LocalPort => $_, Listen => 1,
                                              ReuseAddr => 1) }
                $b, $b + 210, $b + 250;
        $base = $b;
        last;
    }
    my $cmd = join ' ', 'env',
        (map { "-u $_" }
         grep { /^TEST_NGINX_|^IDEM_TEST_(?:QUEUE|OUT)$/ } keys %ENV),
        "TEST_JOBS=1 TEST_PORT_BASE=$base",
        'util/test.sh t/data/ports.tt 2>&1';
    my $out = `$cmd`;
    is($? >> 8, 0, 'TEST_JOBS=1 TEST_PORT_BASE: the run passes')
        or diag($out);
    my %got = $out =~ /^# (TEST_NGINX_\w+)=(.*)$/mg;
    is_deeply([@got{qw(TEST_NGINX_PORT TEST_NGINX_SERVER_PORT
                       TEST_NGINX_BACKEND_PORT TEST_NGINX_REDIS_PORT
                       TEST_NGINX_REDIS_FAULT_PORT)}],
              [$base, $base, $base + 210, $base + 250, $base + 450],
              'TEST_JOBS=1: every port from TEST_PORT_BASE, as shard 0')
        or diag($out);
    is($got{TEST_NGINX_SERVROOT}, "$root/t/servroot-shard-$base",
       'TEST_JOBS=1: the server root named by the base');
}

done_testing();
