# Redis Cluster (idem_redis cluster ...): a real local cluster of 3 masters
# (t/lib/RedisCluster.pm, redis-cli --cluster create).  Records, status
# reads and dedupe on call ids whose slots are spread over all masters;
# the directive's checks; a master that cannot be reached.  Slot
# migration, failover and two gateways: t/185-redis-cluster-faults.t.

use lib 't/lib';
use RedisCluster;
use IdemWait ();
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): the blocks count executions in the records of fixed call
# ids and resolve them once; a second run finds them grown or resolved.

$ENV{TEST_NGINX_REDIS_CLUSTER_PORT} = RedisCluster::base();
$ENV{TEST_NGINX_REDIS_CLUSTER_PORT1} = RedisCluster::base() + 1;
$ENV{TEST_NGINX_REDIS_CLUSTER_PORT2} = RedisCluster::base() + 2;

# ids whose slots fall on each of the 3 masters (ranges of --cluster create)
our @ids = map { "cl-$$-$_" } 1 .. 24;
our %slot_of = map { $_ => RedisCluster::cli(RedisCluster::base(),
                                             'cluster', 'keyslot', $_) }
               @ids
    if RedisCluster::create(0);

# the masters holding at least one of the keys written
sub masters_with_keys {
    my $n = 0;
    for my $p (0 .. 2) {
        my $port = RedisCluster::base() + $p;
        $n++ if RedisCluster::cli($port, 'dbsize') > 0;
    }
    return $n;
}

END { RedisCluster::stop() }

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: the slots of the ids written are on all three masters
--- config
    location /t { return 200; }
--- request
GET /t
--- init
my %on = map { RedisCluster::slot_owner($main::slot_of{$_}) => 1 }
         @main::ids;
Test::More::is(scalar keys %on, 3, "24 ids: their slots are on 3 masters");
--- no_error_log
[error]



=== TEST 2: records of 24 calls spread over all slots, then their status reads
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_REDIS_CLUSTER_PORT timeout=500ms;
--- config
    location /t {
        idem on;
        idem_record on;
        # one write per call, a short record (TEST 3b), however slowly the
        # backend forks: past the default 5ms the arrival goes first
        idem_record_arrival_delay 2s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- init
IdemWait::log_ok('the worker read the full slot map',
                  qr/idem: redis cluster: map from "[^"]*": 16384 slots on 3 masters\b/);
--- request eval
[(map { "GET /t" } @main::ids), (map { "GET /calls/$_" } @main::ids),
 "GET /calls/cl-$$-none"]
--- more_headers eval
[(map { "X-Call-Id: $_" } @main::ids), (map { "" } @main::ids), ""]
--- error_code eval
[(map { 200 } @main::ids), (map { 200 } @main::ids), 404]
--- response_body_like eval
[(map { "n=1 " } @main::ids),
 (map { qq{"call_id":"$_",.*"state":"SUCCESS"} } @main::ids),
 '^\{"state":"NOT_FOUND"\}$']
--- no_error_log
[error]



=== TEST 3: every master holds records
--- request
GET /calls/cl-none-3
--- init
Test::More::is(main::masters_with_keys(), 3, "records on all 3 masters");
--- error_code: 404
--- no_error_log
[error]



=== TEST 3b: the same ids again: each short record becomes a hash of two executions on its own master (the upgrade script sent to its key's slot)
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_REDIS_CLUSTER_PORT timeout=500ms;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- init
my $short = grep {
    RedisCluster::cli(RedisCluster::slot_owner($main::slot_of{$_}),
                      'type', "idem:c:{$_}") eq 'string'
} @main::ids;
Test::More::is($short, scalar @main::ids, 'short records, all of them');
--- request eval
[(map { "GET /t" } @main::ids), (map { "GET /calls/$_" } @main::ids)]
--- more_headers eval
[(map { "X-Call-Id: $_" } @main::ids), (map { "" } @main::ids)]
--- wait: 0.1
--- error_code eval
[(map { 200 } @main::ids), (map { 200 } @main::ids)]
--- response_body_like eval
[(map { "n=2 " } @main::ids),
 (map { qq{"call_id":"$_",.*"executions":2,} } @main::ids)]
--- no_error_log
[error]



=== TEST 3c: ... (hashes, counted)
--- request
GET /calls/cl-none-3c
--- init
my $hashes = grep {
    my $p = RedisCluster::slot_owner($main::slot_of{$_});
    RedisCluster::cli($p, 'type', "idem:c:{$_}") eq 'hash'
        && RedisCluster::cli($p, 'hget', "idem:c:{$_}", 'n') eq '1'
} @main::ids;
Test::More::is($hashes, scalar @main::ids, 'hashes with one count, all');
--- error_code: 404
--- no_error_log
[error]



=== TEST 4: dedupe on ids over all slots: claimed, replayed, 422 on another body
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_REDIS_CLUSTER_PORT2 timeout=500ms;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
IdemWait::log_ok('the worker read the full slot map',
                  qr/idem: redis cluster: map from "[^"]*": 16384 slots on 3 masters\b/);
--- request eval
[(map { "POST /d\nx=1" } @main::ids), (map { "POST /d\nx=1" } @main::ids),
 (map { "POST /d\nx=2" } @main::ids[0 .. 2])]
--- more_headers eval
[(map { "X-Call-Id: d$_" } @main::ids), (map { "X-Call-Id: d$_" } @main::ids),
 (map { "X-Call-Id: d$_" } @main::ids[0 .. 2])]
--- error_code eval
[(map { 200 } @main::ids), (map { 200 } @main::ids), 422, 422, 422]
--- response_headers eval
[(map { "!Idempotent-Replayed" } @main::ids),
 (map { "Idempotent-Replayed: true" } @main::ids), "", "", ""]
--- response_body_like eval
[(map { "\\An=1 " } @main::ids), (map { "\\An=1 " } @main::ids),
 "payload-mismatch", "payload-mismatch", "payload-mismatch"]
--- no_error_log
[error]



=== TEST 5: a seed that is down: the map comes from another one
--- http_config
    idem_redis cluster 127.0.0.1:1 127.0.0.1:$TEST_NGINX_REDIS_CLUSTER_PORT1
               connect_timeout=200ms timeout=500ms;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- init
IdemWait::log_ok('the worker read the full slot map',
                  qr/idem: redis cluster: map from "[^"]*": 16384 slots on 3 masters\b/);
--- request eval
[(map { "GET /t" } @main::ids[0 .. 5]),
 (map { "GET /calls/$_" } @main::ids[0 .. 5])]
--- more_headers eval
[(map { "X-Call-Id: s$_" } @main::ids[0 .. 5]), (map { "" } 0 .. 5)]
--- error_code eval
[(map { 200 } 0 .. 5), (map { 200 } 0 .. 5)]
--- response_body_like eval
[(map { "n=1 " } 0 .. 5), (map { '"state":"SUCCESS"' } 0 .. 5)]
--- no_error_log
[alert]
[crit]



=== TEST 6: no cluster node reachable: status UNKNOWN, counted as dropped
--- http_config
    idem_redis cluster 127.0.0.1:1 127.0.0.1:2 connect_timeout=200ms
               timeout=300ms;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request
GET /calls/none-6
--- error_code: 503
--- response_body_like: ^\{"state":"UNKNOWN"\}$
--- error_log
idem: redis "cluster": since the last report: 1 dropped (not connected)
--- no_error_log
[alert]
[crit]



=== TEST 6b: no cluster node reachable: records dropped, dedupe fails closed
--- request eval
["GET /t", "POST /d\nx"]
--- more_headers eval
["X-Call-Id: down-6", "X-Call-Id: down-6d"]
--- error_code eval
[200, 503]
--- response_body_like eval
["n=1 ", "dedupe-unavailable"]
--- no_error_log
[alert]
[crit]



=== TEST 7: resolutions (idem_status resolve=on) of UNKNOWN calls whose slots are on every master
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_REDIS_CLUSTER_PORT timeout=500ms;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_read_timeout 100ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
--- request eval
[(map { "GET /t" } @main::ids),
 (map { "POST /calls/r$_\n{\"outcome\":\"applied\",\"receipt\":\"x-$_\"}" }
      @main::ids),
 (map { "GET /calls/r$_" } @main::ids)]
--- more_headers eval
[(map { "X-Call-Id: r$_" } @main::ids), (map { "" } @main::ids),
 (map { "" } @main::ids)]
--- error_code eval
[(map { 504 } @main::ids), (map { 200 } @main::ids),
 (map { 200 } @main::ids)]
--- response_body_like eval
[(map { "" } @main::ids),
 (map { qq|"call_id":"r$_",.*"state":"SUCCESS",.*"resolved":\\{"execution":1,"outcome":"applied","at_ms":\\d+,"receipt":"x-$_"| } @main::ids),
 (map { qq|"call_id":"r$_",.*"state":"SUCCESS",.*"receipt":"x-$_"| } @main::ids)]
--- no_error_log
[alert]
[emerg]



=== TEST 8: "cluster" without nodes
--- http_config
    idem_redis cluster timeout=1s;
--- config
    location /t { return 200; }
--- must_die
--- error_log
"idem_redis cluster" needs at least one IP address and port



=== TEST 9: cluster nodes are IPs, not names or unix sockets
--- http_config
    idem_redis cluster unix:/tmp/r.sock;
--- config
    location /t { return 200; }
--- must_die
--- error_log
invalid value "unix:/tmp/r.sock" in "idem_redis" directive, it must be an IP address and port



=== TEST 10: db= has no meaning in a cluster
--- http_config
    idem_redis cluster 127.0.0.1:7000 db=1;
--- config
    location /t { return 200; }
--- must_die
--- error_log
invalid parameter "db=1" in "idem_redis" directive
