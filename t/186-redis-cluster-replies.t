# What a cluster node answers cannot hurt a worker: a fake node
# (t/lib/FakeRedisCluster.pm) claims every slot, then answers each read
# with a redirect loop, or a MOVED/ASK that is malformed, names a host
# name, a slot out of range, port 0, or a node that is down.  Each read
# ends in 503 UNKNOWN (never a hang past its timeout, never a crash); a
# loop stops after 5 redirects.

use lib 't/lib';
use FakeRedisCluster;
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): a Redis failure is reported once a period ("since the
# last report"): the second run's identical failure is not logged again.

$ENV{TEST_NGINX_FAKE_CLUSTER_PORT} = ($ENV{TEST_NGINX_REDIS_PORT} || 16379)
                                     + 350;
FakeRedisCluster::start($ENV{TEST_NGINX_FAKE_CLUSTER_PORT});

END { local $?; FakeRedisCluster::stop() }

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
select(undef, undef, undef, 0.5);
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
