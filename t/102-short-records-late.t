# Writes that meet a short record's other form, and what may move a short
# claim's lease (issue 52).  A write whose answer asks for more (an
# owner's APPEND that met the hash its record became: WRONGTYPE, then the
# upgrade script; a record-only SET ... NX that met a record: nil, then
# the script) is not given up when that answer comes after idem_redis's
# timeout: Redis paused past it, the script still goes once the answer is
# in.  A short claim's lease, relative to its expiry ("+<ms> <ttl>"),
# moves only with its owner's writes: another call's PEXPIRE of the id (a
# record-only route) has NX, and its refresh goes after its HSET, which
# made the record a hash first (the lease then in Redis's time).  A Redis
# before 7.0 that refuses PEXPIRE with NX (emulated by RedisHoldProxy):
# one notice, then plain PEXPIREs, the record's expiry set all the same.
#
# The paused Redis is the tests' own (t/lib/RedisFault.pm); the owner runs
# in the background (curl, from --- init), held by the backend (/hold/1).

BEGIN {
    if ($ENV{TEST_NGINX_USE_VALGRIND}) {
        require Test::More;
        Test::More::plan(skip_all => 'background requests across blocks, '
                                     . 'timed by Redis paused: not under '
                                     . 'valgrind');
    }
}

use lib 't/lib';
use Time::HiRes ();
use RedisFault;
use RedisHoldProxy ();
use IdemRecord;
use IdemWait;
use IdemBg qw(bg done);
use IdemPaths ();
use Digest::SHA ();
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): fixed call ids, written in a set order while Redis is
# paused and resumed.

# TEST 5-6: Redis behind a proxy that refuses PEXPIRE with NX (and SET
# with NX and GET), as Redis 5 and 6 do
our ($Refusing, $RefusingPid);
BEGIN {
    $Refusing = ($ENV{TEST_NGINX_REDIS_PORT} || 16379) + 491;
    $ENV{TEST_NGINX_REFUSING_REDIS} = $Refusing;
}

sub redis {
    my $out = `redis-cli -p $ENV{TEST_NGINX_REDIS_FAULT_PORT} @_`;
    chomp $out;
    return $out;
}

sub record { IdemRecord::fields($ENV{TEST_NGINX_REDIS_FAULT_PORT}, @_) }
sub type   { IdemRecord::type($ENV{TEST_NGINX_REDIS_FAULT_PORT}, @_) }

# Redis's clock, unix ms
sub now {
    my ($s, $us) = split /\n/, redis('time');
    return $s * 1000 + int($us / 1000);
}

# a string at $key, as a short record is, with its expiry
sub put {
    my ($key, $value, $px) = @_;
    open my $p, '|-', "redis-cli -p $ENV{TEST_NGINX_REDIS_FAULT_PORT} -x set '$key' >/dev/null"
        or die "redis-cli: $!";
    print $p $value;
    close $p;
    redis('pexpire', "'$key'", $px);
}

# executions of a record: its e:/f: tokens
sub executions {
    my (%r) = @_;
    my %t = map { /^[ef]:(.+)$/ ? ($1 => 1) : () } keys %r;
    return scalar keys %t;
}

# Redis is stopped for real: the signal is delivered
sub pause {
    RedisFault::pause();
    my $pid = RedisFault::pid();
    for (1 .. 500) {
        open my $fh, '<', "/proc/$pid/stat" or last;
        return if <$fh> =~ /^\d+ \(.*\) T /;
        Time::HiRes::sleep(0.01);
    }
    Test::More::fail('Redis is not stopped');
}

# a curl call to this block's server; its answer, headers and body
sub call {
    my ($id, @args) = @_;
    my $base = "http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}";
    @args = map { m{^/} ? "$base$_" : $_ } @args;
    return scalar `curl -s -i --noproxy '*' --max-time 10 -H 'X-Call-Id: $id' @args`;
}

# how many ops have met idem_redis's timeout so far
sub timeouts {
    return IdemWait::log_count(qr/idem redis: no reply within the timeout/);
}

# Redis paused while $change runs, until an op has met the timeout
# (its answer cannot come before that), then resumed
sub late {
    my ($what, $change) = @_;
    my $n = timeouts();
    main::pause();
    $change->();
    Test::More::ok(IdemWait::wait_for("the timeout of $what",
                                      sub { timeouts() > $n }),
                   "$what: no answer within the timeout");
    RedisFault::resume();
}

# before nginx starts, so that its first connect succeeds
RedisFault::start();
system("redis-cli -p $ENV{TEST_NGINX_REDIS_FAULT_PORT} flushall >/dev/null");

$RefusingPid = RedisHoldProxy::start($Refusing,
                                     $ENV{TEST_NGINX_REDIS_FAULT_PORT},
                                     IdemPaths::scratch() . '/no-hold',
                                     refuse_set_get => 1);

no_long_string();
no_shuffle();
run_tests();

END {
    local $?;
    IdemBg::stop_all();
    RedisHoldProxy::stop($RefusingPid);
    RedisFault::stop();
}

__DATA__

=== TEST 1: a short claim made a hash (a resolution asked too early), its owner's final write sent to a paused Redis: the late WRONGTYPE still sends it through the upgrade script, and a resend is replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT timeout=1s;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_lease 300ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
--- init
my $key = 'idem:c:{sl-1}';
main::bg('owner1', 'sl-1', '/pay', '--data', 'x=1');
IdemWait::owner_in('sl-1');
Test::More::is(main::type($key), 'string', 'a short claim');
Test::More::ok(IdemWait::wait_for('its lease lapsed', sub {
    IdemWait::get($ENV{TEST_NGINX_SERVER_PORT}, '/calls/sl-1')
        =~ /"state":"UNKNOWN"/ }), 'its lease lapsed: UNKNOWN');
Test::More::like(main::call('sl-1', '-X', 'POST', '--data',
                            "'{\"outcome\":\"not_applied\"}'", '/calls/sl-1'),
                 qr{^HTTP/1.1 409 .*resolution-too-early}s,
                 'a resolution too early');
Test::More::is(main::type($key), 'hash', '... made it a hash');
main::late("the owner's final write", sub {
    IdemWait::release('sl-1');
    Test::More::like(main::done('owner1'), qr{^HTTP/1\.1 200 },
                     'the owner: 200');
});
Test::More::ok(IdemWait::wait_for('its final write in Redis',
                   sub { main::redis('hkeys', "'$key'") =~ /^k:/m }),
               'its final write is in Redis');
my %r = main::record($key);
Test::More::is($r{"k:$r{o}"}, 'R', 'the answer kept');
Test::More::like($r{"f:$r{o}"} // '', qr/^SUCCESS 200 /, 'SUCCESS');
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: sl-1
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
--- response_body_like: ^n=1 
--- no_error_log
[error]



=== TEST 2: a record-only call sent twice, the second's SET ... NX answered after the timeout (Redis paused): its nil still sends the write through the upgrade script, two executions
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT timeout=1s;
--- config
    location /r {
        idem on;
        idem_record on;
        idem_record_arrival_delay 10s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- init
my $key = 'idem:c:{sl-2}';
Test::More::like(main::call('sl-2', '/r'), qr{^HTTP/1.1 200 }, 'the first: 200');
Test::More::ok(IdemWait::wait_for('a short record',
                   sub { main::type($key) eq 'string' }), 'a short record');
main::late('the second call', sub {
    Test::More::like(main::call('sl-2', '/r'), qr{^HTTP/1.1 200 },
                     'the second: 200');
});
Test::More::ok(IdemWait::wait_for('both executions in Redis', sub {
    main::type($key) eq 'hash' && main::executions(main::record($key)) == 2
}), 'both executions are in Redis');
--- request
GET /calls/sl-2
--- response_body_like: "state":"SUCCESS",.*"executions":2,
--- no_error_log
[error]



=== TEST 3: a short claim that lapsed a minute ago (by hand: its lease a minute from an expiry two minutes gone), then a record-only call of its id (HSET and PEXPIRE): a resend still gets 409 call-outcome-unknown, not call-in-flight
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT timeout=1s;
    idem_record_ttl 10m;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /r {
        idem on;
        idem_record on;
        idem_record_arrival_delay 0;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
my $t = 'dddddddddddddddddddddddddddddddd';
my $e = "R 1796594859599 client vm POST bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb /d";
my $v = join '', map { "$_->[0] " . length($_->[1]) . " $_->[1]\n" }
    ['o', $t], ['d', Digest::SHA::sha256_hex("POST /d\npay")],
    ["l:$t", '+60000 600000'], ["b:$t", '-'], ["e:$t", $e], ['v', '1'];
main::put('idem:c:{sl-3}', $v, 480000);
--- request eval
["GET /r", "POST /d\npay", "GET /r"]
--- more_headers eval
["X-Call-Id: sl-3", "X-Call-Id: sl-3", "X-Call-Id: sl-3n"]
--- error_code eval
[200, 409, 200]
--- response_body_like eval
["^n=1 ", "call-outcome-unknown", "^n=1 "]
--- no_error_log
[error]



=== TEST 4: ... in Redis: a hash whose lease lapsed a minute ago by Redis's clock, its expiry refreshed by the record-only call (after its HSET) and that call counted; a new id's record gets its expiry from the PEXPIRE with NX
--- init
my $key = 'idem:c:{sl-3}';
my $t = 'dddddddddddddddddddddddddddddddd';
Test::More::ok(IdemWait::wait_for('the record-only call counted',
                   sub { my %r = main::record($key); ($r{n} // 0) >= 1 }),
               'the record-only call is counted');
Test::More::is(main::type($key), 'hash', 'a hash');
my %r = main::record($key);
my $lapsed = main::now() - $r{"l:$t"};
Test::More::cmp_ok($lapsed, '>', 50000, "the lease lapsed ${lapsed} ms ago");
Test::More::is(main::executions(%r), 2, 'two executions');
my $pttl = main::redis('pttl', "'$key'");
Test::More::cmp_ok($pttl, '>', 590000, "its expiry refreshed (${pttl} ms)");
my $new = main::redis('pttl', "'idem:c:{sl-3n}'");
Test::More::cmp_ok($new, '>', 590000, "a new id's expiry (${new} ms)");
--- config
    location /t { return 200; }
--- request
GET /t
--- no_error_log
[error]



=== TEST 5: a Redis that refuses PEXPIRE with NX (5, 6): one notice, then plain PEXPIREs; the calls go on
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REFUSING_REDIS;
--- config
    location /r {
        idem on;
        idem_record on;
        idem_record_arrival_delay 0;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request eval
["GET /r", "GET /r"]
--- more_headers eval
["X-Call-Id: sl-5a", "X-Call-Id: sl-5b"]
--- error_code eval
[200, 200]
--- no_error_log
[error]



=== TEST 6: ... (each record with its expiry, the notice once, the same nginx)
--- init
for my $id (qw(sl-5a sl-5b)) {
    my $key = "idem:c:{$id}";
    Test::More::ok(IdemWait::wait_for("the end of $id",
                       sub { main::redis('hkeys', "'$key'") =~ /^f:/m }),
                   "$id: its end");
    my $pttl = main::redis('pttl', "'$key'");
    Test::More::cmp_ok($pttl, '>', 0, "$id: its expiry (${pttl} ms)");
}
Test::More::is(IdemWait::log_count(qr/\[notice\].*Redis refused PEXPIRE with NX/),
               1, 'one notice');
Test::More::is(IdemWait::log_count(qr/write "idem:c:\{sl-5b\}": .* ttl [1-9]\d*, first/),
               1, 'the next PEXPIRE without NX at once');
--- request
GET /r
--- more_headers
X-Call-Id: sl-5c
--- error_code: 200
--- no_error_log
[error]
