# The list of calls that need a person (t/173) on a Redis Cluster
# (t/lib/RedisCluster.pm, 3 real masters): the page of the stream is read
# on the stream's own master (its slot), each call's record on its own
# slot's master.

use lib 't/lib';
use RedisCluster;
use IdemWait ();
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): fixed call ids that end UNKNOWN once.

$ENV{TEST_NGINX_REDIS_CLUSTER_PORT} = RedisCluster::base();

# ids whose records fall on each of the 3 masters
our @ids = map { "ulc-$$-$_" } 1 .. 12;
our %slot_of;

if (RedisCluster::create(0)) {
    %slot_of = map { $_ => RedisCluster::cli(RedisCluster::base(),
                                             'cluster', 'keyslot', $_) }
               @ids, 'idem:people';
}

END { RedisCluster::stop() }

no_long_string();
no_shuffle();
run_tests();

# the list's JSON, these calls in this order, up to "next"
sub listed {
    return '^\{"calls":\['
           . join(',', map { '\{"call_id":"' . $_ . '",[^{]*\}' } @_)
           . '\],"next":';
}

__DATA__

=== TEST 1: 12 UNKNOWN calls whose records are on all 3 masters: all listed, newest first, paged; one resolved leaves the list
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_REDIS_CLUSTER_PORT timeout=500ms;
    idem_unknown_stream people;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/9;
    }
    location /_idem/calls/ {
        idem_status resolve=on;
    }
--- init
IdemWait::log_ok('the worker read the full slot map',
                  qr/idem: redis cluster: map from "[^"]*": 16384 slots on 3 masters\b/);
my %on = map { RedisCluster::slot_owner($main::slot_of{$_}) => 1 }
         @main::ids;
Test::More::is(scalar keys %on, 3, "12 ids: their slots are on 3 masters");
--- request eval
[(map { "POST /t\na=1" } @main::ids), "GET /_idem/calls/",
 "GET /_idem/calls/?limit=5", "POST /_idem/calls/$main::ids[11]\n{\"outcome\":\"not_applied\"}",
 "GET /_idem/calls/"]
--- more_headers eval
[(map { "X-Call-Id: $_" } @main::ids), "", "", "", ""]
--- error_code eval
[(map { 502 } @main::ids), 200, 200, 200, 200]
--- response_body_like eval
[(map { "" } @main::ids),
 main::listed(reverse @main::ids) . 'null\}$',
 main::listed(reverse @main::ids[7 .. 11]) . '"\d+-\d+"\}$',
 '"state":"FAILED"',
 main::listed(reverse @main::ids[0 .. 10]) . 'null\}$']
--- no_error_log eval
qr/\[(?:alert|crit)\]|\[error\].*idem: redis/
