# A Redis Cluster that announces its nodes by host name (Redis 7's
# cluster-announce-hostname with cluster-preferred-endpoint-type
# hostname: CLUSTER SLOTS and MOVED name hosts, not IPs): a real local
# cluster of 3 masters (t/lib/RedisCluster.pm), each node a name of its
# own that the suite's DNS server (t/lib/IdemDns.pm) maps to 127.0.0.1.
# Through http{}'s resolver: records, status and dedupe on ids over all
# masters, from a seed given by IP or by name; without a resolver the
# named nodes are skipped, with a line saying one is needed, and a seed
# given by name fails nginx -t.  A MOVED and an ASK naming a host, from a
# fake node (t/lib/FakeRedisCluster.pm), are followed to that name.

our ($Map);

BEGIN {
    # the map in the file's own scratch folder (t/lib/IdemPaths.pm)
    require lib;
    lib->import('t/lib');
    require IdemPaths;
    $Map = IdemPaths::scratch() . '/dns-map';
    $IdemDns::Map = $Map;
}

use lib 't/lib';
use IdemDns;
use RedisCluster;
use FakeRedisCluster;
use IdemWait ();
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): the blocks count executions in the records of fixed
# call ids; a second run finds them grown.

$ENV{TEST_NGINX_DNS_PORT} = $IdemDns::Port;
$ENV{TEST_NGINX_REDIS_CLUSTER_PORT} = RedisCluster::base();
$ENV{TEST_NGINX_REDIS_CLUSTER_PORT2} = RedisCluster::base() + 2;
$ENV{TEST_NGINX_CLUSTER_NAME} = RedisCluster::hostname(RedisCluster::base());

# a fake node that claims every slot (by IP) and redirects by name
$ENV{TEST_NGINX_FAKE_CLUSTER_PORT} = ($ENV{TEST_NGINX_REDIS_PORT} || 16379)
                                     + 365;

my $fake = $ENV{TEST_NGINX_FAKE_CLUSTER_PORT};

IdemDns::map((map { RedisCluster::hostname(RedisCluster::base() + $_)
                        => ['127.0.0.1', 1] } 0 .. 2),
             'fake-next.idem.test' => ['127.0.0.1', 1]);

# "...{moved-name...}": MOVED to fake-next.idem.test, the node after it;
# "...{ask-name...}": ASK there
FakeRedisCluster::start($fake, sub {
    my ($args, $port) = @_;
    my $cmd = uc $args->[0];
    return "+OK\r\n" if $cmd eq 'AUTH' || $cmd eq 'ASKING';
    return FakeRedisCluster::slots($port, 'f') if $cmd eq 'CLUSTER';
    my $key = ($cmd =~ /^EVAL/ ? $args->[3] : $args->[1]) // '';
    my $to = 'fake-next.idem.test:' . ($port + 1);
    return "-MOVED 12 $to\r\n" if $key =~ /moved-name/;
    return "-ASK 12 $to\r\n" if $key =~ /ask-name/;
    return "-ERR fake\r\n";
});

# the node after it: every read is an empty record (Redis's time: 404);
# its map is the first one's, so that reads keep going there first
FakeRedisCluster::start($fake + 1, sub {
    my ($args, $port) = @_;
    my $cmd = uc $args->[0];
    return "+OK\r\n" if $cmd eq 'AUTH' || $cmd eq 'ASKING';
    return FakeRedisCluster::slots($fake, 'f') if $cmd eq 'CLUSTER';
    return "*1\r\n\$13\r\n1733200000000\r\n" if $cmd =~ /^EVAL/;
    return "-ERR fake\r\n";
});

$RedisCluster::Hostnames = 1;

# ids whose slots fall on each of the 3 masters
our @ids = map { "nm-$$-$_" } 1 .. 24;
our %slot_of = map { $_ => RedisCluster::cli(RedisCluster::base(),
                                             'cluster', 'keyslot', $_) }
               @ids
    if RedisCluster::create(0);

# the masters holding at least one of the keys written
sub masters_with_keys {
    my $n = 0;
    for my $p (0 .. 2) {
        $n++ if RedisCluster::cli(RedisCluster::base() + $p, 'dbsize') > 0;
    }
    return $n;
}

END {
    local $?;
    FakeRedisCluster::stop();
    RedisCluster::stop();
    unlink $Map;
}

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: a seed given by name, the nodes announced by name: records of 24 calls over all masters, then their status reads
--- http_config
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT valid=1s;
    idem_redis cluster $TEST_NGINX_CLUSTER_NAME:$TEST_NGINX_REDIS_CLUSTER_PORT
               timeout=500ms;
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
my $slots = RedisCluster::cli(RedisCluster::base(), 'cluster', 'slots');
Test::More::is(scalar(() = $slots =~ /^node-\d+\.cluster\.idem\.test$/mg),
               3, 'CLUSTER SLOTS names 3 masters by host name');
my %on = map { RedisCluster::slot_owner($main::slot_of{$_}) => 1 }
         @main::ids;
Test::More::is(scalar keys %on, 3, "24 ids: their slots are on 3 masters");
IdemWait::log_ok('the worker read the full slot map from the seed named',
                  qr/idem: redis cluster: map from "node-\d+\.cluster\.idem\.test:\d+": 16384 slots on 3 masters\b/);
--- request eval
[(map { "GET /t" } @main::ids), (map { "GET /calls/$_" } @main::ids)]
--- more_headers eval
[(map { "X-Call-Id: $_" } @main::ids), (map { "" } @main::ids)]
--- error_code eval
[(map { 200 } @main::ids), (map { 200 } @main::ids)]
--- response_body_like eval
[(map { "n=1 " } @main::ids),
 (map { qq{"call_id":"$_",.*"state":"SUCCESS"} } @main::ids)]
--- no_error_log
[error]



=== TEST 2: ... every master holds records
--- request
GET /calls/nm-none-3
--- init
Test::More::is(main::masters_with_keys(), 3, "records on all 3 masters");
--- error_code: 404
--- no_error_log
[error]



=== TEST 3: a seed given by IP, the nodes announced by name: dedupe on ids over all masters, claimed, replayed, 422 on another body
--- http_config
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT valid=1s;
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



=== TEST 4: no resolver: the nodes announced by name are skipped, the line saying a resolver is needed
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_REDIS_CLUSTER_PORT timeout=500ms;
--- config
    location /t { return 200; }
--- init
IdemWait::log_ok('the named nodes skipped',
                  qr/idem: redis cluster: "node-\d+\.cluster\.idem\.test" is not an IP address, skipped: a host name needs a "resolver" in http\{\}/);
IdemWait::log_ok('a map read without them',
                  qr/idem redis cluster: map from "127\.0\.0\.1:\d+": 0 slots on 0 masters, unchanged/);
--- request
GET /t
--- error_code: 200
--- no_error_log
[alert]
[crit]



=== TEST 5: a seed given by name without a resolver fails nginx -t, saying to add one
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_REDIS_CLUSTER_PORT2
               $TEST_NGINX_CLUSTER_NAME:$TEST_NGINX_REDIS_CLUSTER_PORT;
--- config
    location /t { return 200; }
--- must_die
--- error_log eval
qr/"idem_redis cluster \.\.\. node-\d+\.cluster\.idem\.test:\d+" names a host: add a "resolver" to http\{\}/



=== TEST 6: a cluster node given by a name DNS cannot look up: nginx -t names it
--- http_config
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT;
    idem_redis cluster bad..name:7000;
--- config
    location /t { return 200; }
--- must_die
--- error_log
invalid value "bad..name:7000" in "idem_redis" directive, it must be an IP address and port, or a host name and port



=== TEST 7: MOVED to a host name: resolved, the read follows it there (404)
--- http_config
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT valid=1s;
    idem_redis cluster 127.0.0.1:$TEST_NGINX_FAKE_CLUSTER_PORT timeout=500ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
IdemWait::log_ok('the worker read the map',
                  qr/idem: redis cluster: map from /);
--- request
GET /calls/moved-name-1
--- error_code: 404
--- error_log eval
[qr/idem redis cluster: MOVED slot 12 to fake-next\.idem\.test:\d+/,
 qr/idem redis: resolving "fake-next\.idem\.test"/]
--- no_error_log
[error]
[alert]
[crit]



=== TEST 8: ASK to a host name: the same, after ASKING there
--- http_config
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT valid=1s;
    idem_redis cluster 127.0.0.1:$TEST_NGINX_FAKE_CLUSTER_PORT timeout=500ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
IdemWait::log_ok('the worker read the map',
                  qr/idem: redis cluster: map from /);
--- request
GET /calls/ask-name-1
--- error_code: 404
--- error_log eval
[qr/idem redis cluster: ASK slot 12 to fake-next\.idem\.test:\d+/,
 qr/idem redis: resolving "fake-next\.idem\.test"/]
--- no_error_log
[error]
[alert]
[crit]



=== TEST 9: a name with an empty last label ("name."), which nginx's resolver would refuse at every connect: nginx -t names it
--- http_config
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT;
    idem_redis cluster node.idem.test.:7000;
--- config
    location /t { return 200; }
--- must_die
--- error_log
invalid value "node.idem.test.:7000" in "idem_redis" directive, it must be an IP address and port, or a host name and port
