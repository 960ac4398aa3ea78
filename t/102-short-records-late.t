# Writes that meet a short record's other form, and what may move a short
# claim's lease (issue 52).  A write whose answer asks for more (an
# owner's APPEND that met the hash its record became: WRONGTYPE, then the
# upgrade script; a record-only SET ... NX that met a record: nil, then
# the script) is not given up when that answer comes after idem_redis's
# timeout: Redis paused past it, the script still goes once the answer is
# in.
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
use IdemRecord;
use IdemWait;
use IdemBg qw(bg done);
use IdemPaths ();
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): fixed call ids, written in a set order while Redis is
# paused and resumed.


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

no_long_string();
no_shuffle();
run_tests();

END {
    local $?;
    IdemBg::stop_all();
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
