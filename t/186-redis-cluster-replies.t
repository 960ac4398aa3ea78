# What a cluster node answers cannot hurt a worker: a fake node
# (t/lib/FakeRedisCluster.pm) claims every slot, then answers each read
# with a redirect loop, or a MOVED/ASK that is malformed, names a host
# name, a slot out of range, port 0, or a node that is down.  Each read
# ends in 503 UNKNOWN (never a hang past its timeout, never a crash); a
# loop stops after 5 redirects.  A redirect to a node the worker has no
# connection to yet (as to a replica just promoted) is followed: the read
# waits for that connection and is answered there.  A read whose map
# names a master that is down waits for one more read of the map (TEST
# 9-11): it goes to the master the new map names, or that master holds
# it (it may be restarting) until its own timeout, or it fails at its own
# timeout when the map comes late.

use lib 't/lib';
use FakeRedisCluster;
use IdemWait ();
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): a Redis failure is reported once a period ("since the
# last report"): the second run's identical failure is not logged again.

$ENV{TEST_NGINX_FAKE_CLUSTER_PORT} = ($ENV{TEST_NGINX_REDIS_PORT} || 16379)
                                     + 350;
$ENV{TEST_NGINX_STALE_CLUSTER_PORT} = $ENV{TEST_NGINX_FAKE_CLUSTER_PORT} + 2;
FakeRedisCluster::start($ENV{TEST_NGINX_FAKE_CLUSTER_PORT});

# the node after it: it claims every slot too, and answers every read as
# an empty record (Redis's time alone: 404); a read of an id with "auth"
# in it before AUTH on its connection is answered NOAUTH (each connection
# is a process of its own)
my $authed;
FakeRedisCluster::start($ENV{TEST_NGINX_FAKE_CLUSTER_PORT} + 1, sub {
    my ($args, $port) = @_;
    my $cmd = uc $args->[0];
    if ($cmd eq 'AUTH') {
        $authed = 1;
        return "+OK\r\n";
    }
    return "+OK\r\n" if $cmd eq 'ASKING';
    return FakeRedisCluster::slots($port, 'e') if $cmd eq 'CLUSTER';
    return "-NOAUTH Authentication required.\r\n"
        if $cmd =~ /^EVAL/ && ($args->[3] // '') =~ /auth/ && !$authed;
    return "*1\r\n\$13\r\n1733200000000\r\n" if $cmd =~ /^EVAL/;
    return "-ERR fake\r\n";
});

# A third node: its map names a master that is down (the port after it,
# where nothing listens) until $Fresh exists, then itself; it answers
# every read as an empty record (404).  As a worker's map after a
# failover that it has not read yet.
use File::Temp ();
our $Fresh = File::Temp::tempdir(CLEANUP => 1) . '/fresh';
FakeRedisCluster::start($ENV{TEST_NGINX_FAKE_CLUSTER_PORT} + 2, sub {
    my ($args, $port) = @_;
    my $cmd = uc $args->[0];
    return "+OK\r\n" if $cmd eq 'AUTH' || $cmd eq 'ASKING';
    return FakeRedisCluster::slots(-e $Fresh ? $port : $port + 1, 'd')
        if $cmd eq 'CLUSTER';
    return "*1\r\n\$13\r\n1733200000000\r\n" if $cmd =~ /^EVAL/;
    return "-ERR fake\r\n";
});

# A fourth: its map names a master that is down (the port after it),
# and each read of the map after a connection's first is answered 1.5 s
# late: a read that waits for the map runs out of time first.
our $SlowMaps = 0;      # reads of the map on a connection (a process)
FakeRedisCluster::start($ENV{TEST_NGINX_FAKE_CLUSTER_PORT} + 4, sub {
    my ($args, $port) = @_;
    my $cmd = uc $args->[0];
    return "+OK\r\n" if $cmd eq 'AUTH' || $cmd eq 'ASKING';
    if ($cmd eq 'CLUSTER') {
        select(undef, undef, undef, 1.5) if $SlowMaps++;
        return FakeRedisCluster::slots($port + 1, 'c');
    }
    return "-ERR fake\r\n";
});
$ENV{TEST_NGINX_SLOW_CLUSTER_PORT} = $ENV{TEST_NGINX_FAKE_CLUSTER_PORT} + 4;

END { local $?; FakeRedisCluster::stop() }

# until this nginx's worker has read the cluster's map (its line), not a
# fixed time that a loaded machine may take longer than
sub map_read {
    Test::More::ok(IdemWait::wait_for('the map read',
                       sub { IdemWait::log_count(
                                 qr/idem: redis cluster: map from /) }),
                   "the worker read the cluster's map");
}

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: MOVED to the node itself, again and again: 5 redirects, then 503
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_FAKE_CLUSTER_PORT timeout=500ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
main::map_read();
--- request
GET /calls/moved-self-1
--- error_code: 503
--- response_body_like: UNKNOWN
--- error_log
idem redis cluster: more than 5 redirects
failed (last error: "MOVED 12 127.0.0.1:
--- no_error_log
[alert]
[crit]



=== TEST 2: ASK to the node itself, again and again: 5 redirects, then 503
--- init
select(undef, undef, undef, 0.5);
--- request
GET /calls/ask-self-1
--- error_code: 503
--- response_body_like: UNKNOWN
--- error_log
idem redis cluster: more than 5 redirects
--- no_error_log
[alert]
[crit]



=== TEST 3: malformed and impossible redirects: 503 each, the worker lives
--- init
select(undef, undef, undef, 0.5);
--- request eval
["GET /calls/bad-moved-1", "GET /calls/bad-slot-1", "GET /calls/bad-port-1",
 "GET /calls/colons-1", "GET /calls/space-1", "GET /calls/x-1"]
--- error_code eval
[503, 503, 503, 503, 503, 503]
--- response_body_like eval
["UNKNOWN", "UNKNOWN", "UNKNOWN", "UNKNOWN", "UNKNOWN", "UNKNOWN"]
--- no_error_log
[alert]
[crit]
exited on signal



=== TEST 4: MOVED to a host name: not resolved, skipped with an error
--- init
select(undef, undef, undef, 0.5);
--- request
GET /calls/host-name-1
--- error_code: 503
--- error_log
idem: redis cluster: "localhost" is not an IP address, skipped
--- no_error_log
[alert]
[crit]



=== TEST 5: MOVED to a node that is down: 503 at once, no hang
--- init
select(undef, undef, undef, 0.5);
--- request eval
["GET /calls/down-1", "GET /calls/down-2"]
--- error_code eval
[503, 503]
--- timeout: 2
--- no_error_log
[alert]
[crit]
exited on signal



=== TEST 6: MOVED to a node not connected yet: the read waits for the connection, answered there
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_FAKE_CLUSTER_PORT timeout=500ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
main::map_read();
--- request
GET /calls/moved-next-1
--- error_code: 404
--- no_error_log
[error]
[alert]
[crit]



=== TEST 7: ASK to a node not connected yet: the same, after ASKING there
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_FAKE_CLUSTER_PORT timeout=500ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
main::map_read();
--- request
GET /calls/ask-next-1
--- error_code: 404
--- no_error_log
[error]
[alert]
[crit]



=== TEST 8: a password: the handshake goes first on the new connection, the read after it
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_FAKE_CLUSTER_PORT timeout=500ms
               password=secret;
--- config
    location /calls/ {
        idem_status;
    }
--- init
main::map_read();
--- request
GET /calls/moved-next-auth-1
--- error_code: 404
--- no_error_log
[error]
[alert]
[crit]



=== TEST 9: the map names a master that is down, and reading it again says so too: the read waits for that one read of the map, then that master holds it (it may be restarting) until its 3 s timeout: 503, dropped as not connected
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_STALE_CLUSTER_PORT timeout=3s;
--- config
    location /calls/ {
        idem_status;
    }
--- init
main::map_read();
--- request
GET /calls/stale-1
--- error_code: 503
--- timeout: 6
--- error_log
waits for the map
sent again after the map
held until
1 dropped (not connected)
--- no_error_log
[alert]
[crit]



=== TEST 10: the cluster failed over: the next read of the map names the new master, and the read that met the old one goes there (404), not 503
--- init
open my $fh, '>', $main::Fresh or die "$main::Fresh: $!";
close $fh;
--- request
GET /calls/stale-2
--- error_code: 404
--- timeout: 2
--- error_log
waits for the map
sent again after the map
--- no_error_log
[alert]
[crit]



=== TEST 11: the map's next read is late: the read that waits for it runs out of its own time (503 after 300 ms), and the late map finds nothing left to send
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_SLOW_CLUSTER_PORT timeout=300ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
main::map_read();
--- request
GET /calls/slow-1
--- error_code: 503
--- timeout: 2
--- wait: 2
--- error_log
waits for the map
no reply within the timeout
--- no_error_log
sent again after the map
[alert]
[crit]
