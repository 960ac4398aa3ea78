# idem_unknown_stream on a Redis Cluster (t/lib/RedisCluster.pm, 3 real
# masters): the stream is one key, so one slot on one master; each XADD
# goes there while each call's record goes to its own slot's master.  The
# example consumer (--cluster) follows the entries up, reading each
# record on its own master.

use lib 't/lib';
use RedisCluster;
use IdemWait ();
use IdemRecord;
use Cwd qw(abs_path);
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): the blocks read the stream entries and records of fixed
# call ids; a second run finds the first run's too.

$ENV{TEST_NGINX_REDIS_CLUSTER_PORT} = RedisCluster::base();

our $python = '/usr/bin/python3';
our $consumer = abs_path(__FILE__ =~ m{^(.*)/t/} ? $1 : '.')
                . '/util/unknown-consumer.py';

# ids whose records fall on each of the 3 masters
our @ids = map { "usc-$$-$_" } 1 .. 12;
our %slot_of;

if (RedisCluster::create(0)) {
    %slot_of = map { $_ => RedisCluster::cli(RedisCluster::base(),
                                             'cluster', 'keyslot', $_) }
               @ids, 'idem:comp';
}

END { RedisCluster::stop() }

no_long_string();
no_shuffle();
run_tests();

sub stream_master {
    return RedisCluster::slot_owner($main::slot_of{'idem:comp'});
}

__DATA__

=== TEST 1: 12 UNKNOWN calls whose records are on all 3 masters
--- http_config
    idem_redis cluster 127.0.0.1:$TEST_NGINX_REDIS_CLUSTER_PORT timeout=500ms;
    idem_unknown_stream comp;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/9;
    }
--- init
IdemWait::log_ok('the worker read the full slot map',
                  qr/idem: redis cluster: map from "[^"]*": 16384 slots on 3 masters\b/);
my %on = map { RedisCluster::slot_owner($main::slot_of{$_}) => 1 }
         @main::ids;
Test::More::is(scalar keys %on, 3, "12 ids: their slots are on 3 masters");
--- request eval
[map { "POST /t\na=1" } @main::ids]
--- more_headers eval
[map { "X-Call-Id: $_" } @main::ids]
--- error_code eval
[map { 502 } @main::ids]
--- wait: 0.2
--- no_error_log eval
qr/\[(?:alert|crit)\]|\[error\].*idem: redis/



=== TEST 2: the 12 entries on the stream's master, none elsewhere; each record on its own master
--- init
my $m = main::stream_master();
Test::More::is(RedisCluster::cli($m, 'xlen', 'idem:comp'), 12,
               "12 entries on the stream's master ($m)");
for my $p (grep { $_ != $m } map { RedisCluster::base() + $_ } 0 .. 2) {
    # KEYS is local to a node (EXISTS would be redirected)
    Test::More::is(RedisCluster::cli($p, 'keys', 'idem:comp'), '',
                   "no stream on $p");
}
my @lines = split /\n/, RedisCluster::cli($m, 'xrange', 'idem:comp', '-', '+');
my (%token, $id);
for my $i (0 .. $#lines - 1) {
    $id = $lines[$i + 1] if $lines[$i] eq 'call_id';
    $token{$id} = $lines[$i + 1] if $lines[$i] eq 'token';
}
Test::More::is(scalar keys %token, 12, 'every call has its entry');
my $found = 0;
for my $id (@main::ids) {
    my $p = RedisCluster::slot_owner($main::slot_of{$id});
    my %r = IdemRecord::fields($p, "idem:c:{$id}");
    $found++ if ($r{"f:$token{$id}"} // '') =~ /^UNKNOWN 502 /;
}
Test::More::is($found, 12, "each entry's record, UNKNOWN, on its own master");
--- config
    location /x { return 204; }
--- request
GET /x
--- error_code: 204
--- no_error_log
[error]



=== TEST 3: the consumer on the cluster reads every record: 12 rounds 1/2, then a person
--- init
SKIP: {
    Test::More::skip('python3-redis is not installed (make deps)', 4)
        if system("$main::python -c 'import redis' 2>/dev/null") != 0;
    my $cmd = "$main::python $main::consumer --cluster --redis "
              . "127.0.0.1:" . RedisCluster::base() . " --stream idem:comp "
              . "--once --rounds 2 --retry-after 0 2>&1";
    my $out = `$cmd`;
    my @r1 = $out =~ /: round 1\/2: still UNKNOWN \(final status 502\): /g;
    Test::More::is(scalar(@r1), 12, 'round 1: 12 records read, UNKNOWN')
        or Test::More::diag($out);
    $out = `$cmd`;
    my @r2 = $out =~ /: ESCALATE to a person: still UNKNOWN \(final status 502\) after 2 rounds /g;
    Test::More::is(scalar(@r2), 12, 'round 2: 12 to a person')
        or Test::More::diag($out);
    my $m = main::stream_master();
    Test::More::is((split /\n/, RedisCluster::cli($m, 'xpending', 'idem:comp',
                                                   'compensation'))[0],
                   0, 'nothing pending');
    Test::More::is($?, 0, 'the consumer exits 0');
}
--- config
    location /x { return 204; }
--- request
GET /x
--- error_code: 204
--- no_error_log
[error]
