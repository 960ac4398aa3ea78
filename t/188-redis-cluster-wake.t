# idem_dedupe_wait on a Redis Cluster (t/lib/RedisCluster.pm, 3 masters):
# the owner's final write is followed by a plain PUBLISH on the master of
# its key's slot, which the cluster bus carries to every node, so that a
# worker's one subscription, on whichever node, hears it: a waiter whose
# call's slot is on another master than its worker's subscription is
# woken, not polled; and one whose call's slot moves while it waits.

BEGIN {
    if ($ENV{TEST_NGINX_USE_VALGRIND}) {
        require Test::More;
        Test::More::plan(skip_all => 'background requests across blocks, '
                                     . 'timed: not under valgrind');
    }
}

use lib 't/lib';
use IdemRecord;
use RedisCluster;
use IdemBg qw(bg done);
use IdemWait ();
use Test::Nginx::Socket 'no_plan';

$ENV{TEST_NGINX_REDIS_CLUSTER_PORT} = RedisCluster::base();

RedisCluster::create(0);

# call ids whose slots are on each master
our %id_on;
for my $i (1 .. 60) {
    my $id = "cw-$$-$i";
    my $slot = RedisCluster::cli(RedisCluster::base(), 'cluster', 'keyslot',
                                 $id);
    $id_on{RedisCluster::slot_owner($slot)} //= $id;
}

END { IdemBg::stop_all(); RedisCluster::stop() }

# every block: the cluster, and a waiting route held at the backend
add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value('http_config', '    idem_redis cluster '
        . '127.0.0.1:$TEST_NGINX_REDIS_CLUSTER_PORT timeout=500ms;')
        unless defined $block->http_config;
    $block->set_value('config', <<'CONF') unless defined $block->config;
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_wait 20s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
CONF
});

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: waiters of calls on each of the three masters are woken by their owners' final writes
--- init
Test::More::is(scalar keys %main::id_on, 3, 'ids on the three masters');
IdemWait::log_ok('subscribed', qr/subscribed to "idem:wake"/);
for my $id (sort values %main::id_on) {
    main::bg("owner-$id", $id, '/pay', '--data', 'x=1');
    IdemWait::owner_in($id);
    main::bg("dup-$id", $id, '/pay', '--data', 'x=1');
    IdemWait::release_when($id, \&IdemWait::watched, 1);
    Test::More::like(main::done("dup-$id"), qr/^Idempotent-Replayed: true\r$/mi,
                     "$id: the waiter got the replay");
    Test::More::like(main::done("owner-$id"), qr{^HTTP/1\.1 200 },
                     "$id: the owner 200");
    Test::More::is(IdemWait::log_count(qr/idem dedupe: "\Q$id\E" woken by its owner's final write/),
                   1, "$id: woken");
    Test::More::is(IdemWait::log_count(qr/idem dedupe: "\Q$id\E" asks again/),
                   1, "$id: asked once more");
}
--- request
GET /log/nothing
--- error_code: 200
--- no_error_log
[error]



=== TEST 2: a slot moved while a call's waiter waits: the owner's final write follows MOVED to the slot's new master, whose PUBLISH reaches the waiter's subscription; woken, the waiter asks the new master and gets the replay
--- init
my $base = RedisCluster::base();
my @masters = map { $base + $_ } 0 .. 2;
my $id = "cw-$$-moved";
my $slot = RedisCluster::cli($base, 'cluster', 'keyslot', $id);
my $src = RedisCluster::slot_owner($slot);
my ($dst) = grep { $_ != $src } @masters;
IdemWait::log_ok('subscribed', qr/subscribed to "idem:wake"/);
main::bg('owner-moved', $id, '/pay', '--data', 'x=1');
IdemWait::owner_in($id);
main::bg('dup-moved', $id, '/pay', '--data', 'x=1');
Test::More::ok(IdemWait::wait_for("the waiter of $id watched",
                   sub { IdemWait::watched($id) >= 1 }),
               "the waiter of $id is watched");
RedisCluster::cli($dst, 'cluster', 'setslot', $slot, 'importing',
                  RedisCluster::node_id($src));
RedisCluster::cli($src, 'cluster', 'setslot', $slot, 'migrating',
                  RedisCluster::node_id($dst));
my @keys = split /\n/, RedisCluster::cli($src, 'cluster', 'getkeysinslot',
                                         $slot, 100);
Test::More::is(RedisCluster::cli($src, 'migrate', '127.0.0.1', $dst, '', 0,
                                 5000, 'keys', @keys),
               'OK', "the record of $id migrated");
RedisCluster::cli($_, 'cluster', 'setslot', $slot, 'node',
                  RedisCluster::node_id($dst))
    for @masters;
RedisCluster::wait_ok(\@masters);
Test::More::is(RedisCluster::slot_owner($slot), $dst, "slot $slot moved");
IdemWait::release($id);
Test::More::like(main::done('dup-moved'), qr/^Idempotent-Replayed: true\r$/mi,
                 'the waiter got the replay');
Test::More::like(main::done('owner-moved'), qr{^HTTP/1\.1 200 }, 'the owner 200');
Test::More::is(IdemWait::log_count(qr/idem dedupe: "\Q$id\E" woken by its owner's final write/),
               1, 'woken by the final write');
Test::More::is(IdemWait::backend_runs($id), 1, 'the call ran once');
Test::More::like({ IdemRecord::fields($dst, "idem:c:{$id}") }->{r} // '',
                 qr/./, 'its answer stored on the new master');
--- request
GET /pay
--- error_code: 400
--- no_error_log
[error]
