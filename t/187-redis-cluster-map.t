# A slot map (CLUSTER SLOTS) that names a port no node can have: the entry
# is skipped, never connected to.  hiredis would take 65536 + P as port P
# (getaddrinfo truncates it): the worker would send the slots' commands to
# whatever listens on P.  Found by the redis_cluster fuzz target.
#
# The line checked is written by each read of the map, which a worker
# repeats every second while slots are unserved, not by the request: the
# block waits for it in the whole log (not a fixed time, which a slow or
# loaded machine's timer may overrun, for each run's part of the log).

use lib 't/lib';
use FakeRedisCluster;
use IdemWait ();
use Test::Nginx::Socket 'no_plan';

repeat_each(2);

$ENV{TEST_NGINX_FAKE_CLUSTER_PORT} = ($ENV{TEST_NGINX_REDIS_PORT} || 16379)
                                     + 360;

# every slot on "127.0.0.1:<its own port + 65536>"
FakeRedisCluster::start($ENV{TEST_NGINX_FAKE_CLUSTER_PORT}, sub {
    my ($args, $port) = @_;
    my $cmd = uc $args->[0];
    return "+OK\r\n" if $cmd eq 'AUTH';
    if ($cmd eq 'CLUSTER') {
        my $bad = $port + 65536;
        return "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n\$9\r\n127.0.0.1\r\n"
               . ":$bad\r\n\$40\r\n" . ('f' x 40) . "\r\n";
    }
    return "*1\r\n:1\r\n";
});

END { local $?; FakeRedisCluster::stop() }

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: a port over 65535 in the map: skipped, its slots unserved (503)
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_FAKE_CLUSTER_PORT timeout=500ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
my $skipped = qr/port \d+ in the map from "127\.0\.0\.1:\d+" is not a port, skipped/;
Test::More::ok(IdemWait::wait_for('the map read',
                   sub { IdemWait::log_count($skipped) }),
               'the entry with port 65536 + P is skipped');
--- request
GET /calls/map-1
--- error_code: 503
--- response_body_like: UNKNOWN
--- no_error_log
16384 slots on 1 masters
[alert]
[crit]



=== TEST 2: ... and no read of the map, one after those requests included, served the slots from that port
--- init
my $skipped = qr/port \d+ in the map from "127\.0\.0\.1:\d+" is not a port, skipped/;
my $n = IdemWait::log_count($skipped);
Test::More::ok(IdemWait::wait_for('a read of the map after TEST 1',
                   sub { IdemWait::log_count($skipped) > $n }),
               'the map was read again');
Test::More::is(IdemWait::log_count(qr/16384 slots on 1 masters/), 0,
               'never served');
--- request
GET /calls/map-2
--- error_code: 503
--- response_body_like: UNKNOWN
--- no_error_log
16384 slots on 1 masters
[alert]
[crit]
