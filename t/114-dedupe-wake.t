# idem_dedupe_wait, woken: a waiting duplicate learns its owner's answer
# when the owner's final write lands, not at its next poll.  The owner's
# final write is followed by PUBLISH <prefix>wake <key>; each worker holds
# one subscribed connection and a table of its waiters by key.  Waiters on
# the owner's own worker are woken by the PUBLISH's reply, the others by
# the message, on this gateway or another; a waiter costs two claims (the
# first, and the one after the wake).  The poll stays as the fallback: at
# the owner's lease end (an owner that died), every 5 s, and as before
# while the subscription is down.  A final write that goes again (a short
# record met, made the hash first) publishes once more when it is in.
#
# The owner is held at the backend (util/backend.pl /hold/1) until the
# block releases it; nothing races a fixed sleep: every step waits for the
# debug line that says it happened (t/lib/IdemWait.pm).  Two workers: the
# server on TEST_NGINX_WAKE_PORT listens with reuseport, so that the
# kernel spreads the duplicates over both; the debug lines name the pid
# of the worker that wrote them.

BEGIN {
    if ($ENV{TEST_NGINX_USE_VALGRIND}) {
        require Test::More;
        Test::More::plan(skip_all => 'background requests across blocks, '
                                     . 'timed: not under valgrind');
    }
}

use lib 't/lib';
use IdemBg qw(bg done running);
use IdemPaths ();
use IdemGateway ();
use IdemRecord ();
use IdemWait ();
use Time::HiRes ();
use Test::Nginx::Socket 'no_plan';

master_on();
workers(2);

# the two-worker server, and a second gateway: in this file's range only
$ENV{TEST_NGINX_WAKE_PORT} = IdemNginx::base_port() + 14;
our $gw = IdemNginx::base_port() + 64;

our $log = IdemPaths::error_log();

# the pids of the workers that wrote the lines matching $re, in order
sub pids {
    my ($re) = @_;
    open my $fh, '<', $log or return ();
    my @p;
    while (<$fh>) {
        push @p, $1 if $_ =~ $re && /\[\w+\] (\d+)#/;
    }
    return @p;
}

# waits for $n lines matching $re
sub lines_ok {
    my ($what, $re, $n) = @_;
    Test::More::ok(IdemWait::wait_for($what,
                                      sub { IdemWait::log_count($re) >= $n }),
                   $what);
}

END { IdemBg::stop_all(); IdemGateway::stop_all() }

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: owner on one worker, waiters on both: those of the owner's worker are woken by the PUBLISH's reply, the others by the message; two claims each
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_WAKE_PORT reuseport;
        location /pay {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_call_id_missing reject;
            idem_dedupe_wait 20s;
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
        }
    }
--- config
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
my $url = "http://127.0.0.1:$ENV{TEST_NGINX_WAKE_PORT}/pay";
main::lines_ok('both workers subscribed',
               qr/subscribed to "idem:wake": waiters are woken/, 2);
main::bg('owner1', 'k-1', $url, '--data', 'x=1');
Test::More::ok(IdemWait::wait_for('the owner at the backend',
                   sub { IdemWait::backend_runs('k-1') >= 1 }),
               'the owner is at the backend');
my ($owner) = main::pids(qr/idem dedupe: claim of "idem:c:\{k-1\}" sent/);
# duplicates until one is parked on the other worker (reuseport: the
# kernel picks by the client's port), 32 at most
my $n = 0;
while ($n < 32) {
    main::bg("dup1-$_", 'k-1', $url, '--data', 'x=1') for $n + 1 .. $n + 4;
    $n += 4;
    main::lines_ok("$n waiters watched", qr/idem dedupe: "k-1" watched/, $n);
    last if grep { $_ != $owner } main::pids(qr/idem dedupe: "k-1" watched/);
}
my @at = main::pids(qr/idem dedupe: "k-1" watched/);
my $mine = grep { $_ == $owner } @at;
my $other = @at - $mine;
Test::More::cmp_ok($other, '>', 0, "waiters on the other worker ($other)");
IdemWait::release('k-1');
my @dup = map { main::done("dup1-$_") } 1 .. $n;
Test::More::is(scalar(grep { m{^HTTP/1\.1 200 } && /^Idempotent-Replayed: true\r$/mi } @dup),
               $n, "$n replays");
Test::More::like(main::done('owner1'), qr{^HTTP/1\.1 200 }, 'the owner: 200');
my @woken = main::pids(qr/idem dedupe: "k-1" woken by its owner's final write/);
Test::More::is(scalar @woken, $n, 'every waiter woken');
Test::More::is(scalar(main::pids(qr/idem dedupe: "k-1" asks again/)), $n,
               '... and each asked once more: two claims a waiter');
# each worker woke its own waiters: the owner's by the PUBLISH's reply or
# the message, whichever came first (both come with the same write), the
# other by the message
my @woke = main::pids(qr/idem dedupe: "k-1" woken by its owner's final write/);
Test::More::is(scalar(grep { $_ == $owner } @woke), $mine,
               "the owner's worker woke its $mine");
Test::More::is(scalar(grep { $_ != $owner } @woke), $other,
               "the other worker woke its $other");
Test::More::cmp_ok(scalar(grep { $_ != $owner }
                          main::pids(qr/message: "idem:c:\{k-1\}" written/)),
                   '>=', 1, '... on the message');
--- request
GET /log/k-1
--- response_body_like chomp
^n=1 [^\n]*\n$
--- no_error_log
[error]



=== TEST 2: a waiter on this gateway, its owner on another: woken by the message, not polled
--- init
IdemGateway::start($main::gw,
                   "idem_redis 127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}",
                   $ENV{TEST_NGINX_BACKEND_PORT}, hold => 1, wait => '20s');
main::bg('owner2', 'k-2', "http://127.0.0.1:$main::gw/d", '--data', 'x=1');
Test::More::ok(IdemWait::wait_for('the owner at the backend',
                   sub { IdemWait::backend_runs('k-2') >= 1 }),
               'the owner is at the backend');
main::lines_ok('subscribed', qr/subscribed to "idem:wake"/, 2);
IdemWait::release_when('k-2', \&IdemWait::watched, 1);
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_call_id_missing reject;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_wait 20s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request
POST /d
x=1
--- more_headers
X-Call-Id: k-2
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
--- error_log
idem dedupe: "k-2" woken by its owner's final write
--- no_error_log
[error]



=== TEST 3: ... once watched, the waiter asked once more, when woken: two claims; the owner's gateway ran it once
--- init
for (['in flight, waits', 1], ['watched', 1],
     ["woken by its owner's final write", 1], ['asks again', 1],
     ['not woken any more', 0])
{
    my ($what, $n) = @$_;
    Test::More::is(IdemWait::log_count(qr/idem dedupe: "k-2" \Q$what\E/),
                   $n, "\"$what\": $n");
}
Test::More::like(main::done('owner2'), qr{^HTTP/1\.1 200 }, 'the owner: 200');
--- request
GET /log/k-2
--- response_body_like chomp
^n=1 [^\n]*\n$
--- no_error_log
[error]



=== TEST 4: the subscriber's connection killed while a duplicate waits: it polls again, and gets the answer
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
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
--- init
main::lines_ok('subscribed', qr/subscribed to "idem:wake"/, 2);
main::bg('owner4', 'k-4', '/pay', '--data', 'x=1');
Test::More::ok(IdemWait::wait_for('the owner at the backend',
                   sub { IdemWait::backend_runs('k-4') >= 1 }),
               'the owner is at the backend');
main::bg('dup4', 'k-4', '/pay', '--data', 'x=1');
main::lines_ok('the waiter watched', qr/idem dedupe: "k-4" watched/, 1);
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} client kill type pubsub >/dev/null");
main::lines_ok('the waiter polls',
               qr/idem dedupe: "k-4" not woken any more: it polls/, 1);
main::lines_ok('a polling waiter asks again',
               qr/idem dedupe: "k-4" asks again/, 2);
IdemWait::release('k-4');
my $d = main::done('dup4');
Test::More::like($d, qr/^Idempotent-Replayed: true\r$/mi, 'the waiter: a replay');
Test::More::like(main::done('owner4'), qr{^HTTP/1\.1 200 }, 'the owner: 200');
main::lines_ok('subscribed again', qr/subscribed to "idem:wake"/, 4);
--- request
GET /log/k-4
--- response_body_like chomp
^n=1 [^\n]*\n$
--- error_log
connection lost
--- no_error_log
[error]



=== TEST 5: an owner whose gateway died: its waiter asks again when the lease ends, not at the 5 s fallback nor at its wait's end
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
# as a gateway that died after its claim leaves it: o, d, its arrival, a
# lease that lapses 1.5 s from now (Redis's clock)
my ($s, $us) = split /\n/, `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} time`;
$main::t0 = Time::HiRes::time();
my $now = $s * 1000 + int($us / 1000);
my $d = `printf 'POST /pay\nx=1' | sha256sum`;
$d =~ s/\s.*//s;
system("redis-cli", "-p", $ENV{TEST_NGINX_REDIS_PORT}, "hset",
       "idem:c:{k-5}", "o", "tok5", "d", $d, "v", "1",
       "l:tok5", $now + 1500,
       "e:tok5", "P " . ($now - 100)
                 . " client gw-dead POST 4bf92f3577b34da6a3ce929d0e0e4736 /pay");
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} pexpire idem:c:{k-5} 60000 >/dev/null");
main::lines_ok('subscribed', qr/subscribed to "idem:wake"/, 2);
# the duplicate's claim held 300 ms in Redis (a slow Redis, a slow turn):
# the lease's rest it reads counts from its answer, not from its sending
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} client pause 300 write >/dev/null");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_wait 20s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: k-5
--- timeout: 10
--- error_code: 409
--- response_body_like chomp
"type":"urn:ngx-idem:problem:call-outcome-unknown".*"node":"gw-dead"
--- error_log
idem dedupe: "k-5" watched
--- no_error_log
[error]



=== TEST 6: ... when the lease ended, asked once more: at the lease's end
--- init
my $t = Time::HiRes::time() - $main::t0;
Test::More::cmp_ok($t, '<', 4.5, "answered when the lease lapsed ($t s)");
Test::More::cmp_ok($t, '>', 1.4, '... not before');
Test::More::is(IdemWait::log_count(qr/idem dedupe: "k-5" asks again/), 1,
               'one claim more, at the lease end');
Test::More::is(IdemWait::log_count(qr/idem dedupe: "k-5" watched, asked again in 1?[0-9]{1,3} ms/), 1,
               '... which the first claim said');
--- request
GET /pay
--- more_headers
X-Call-Id: k-6
--- error_code: 200
--- no_error_log
[error]



=== TEST 7: a route without idem_dedupe_wait publishes nothing, and no worker subscribes
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: k-7
--- error_code: 200
--- no_error_log
[error]
PUBLISH
SUBSCRIBE



=== TEST 8: the owner's final write (added to its short claim) meets a hash there (an older gateway's claim or a resolution makes one; here by hand), and goes through the upgrade script: the PUBLISH sent with it went before it, so it publishes once more when it is in; its waiter on this gateway replayed, woken
--- init
my $r = $ENV{TEST_NGINX_REDIS_PORT};
my $key = 'idem:c:{k-8}';
main::lines_ok('subscribed', qr/subscribed to "idem:wake"/, 2);
main::bg('owner8', 'k-8', "http://127.0.0.1:$main::gw/d", '--data', 'x=1');
Test::More::ok(IdemWait::wait_for('the owner at the backend',
                   sub { IdemWait::backend_runs('k-8') >= 1 }),
               'the owner is at the backend');
main::bg('dup8', 'k-8', '/d', '--data', 'x=1');
main::lines_ok('the waiter watched', qr/idem dedupe: "k-8" watched/, 1);
# the claim is short, and its waiter's claim left it so
Test::More::is(IdemRecord::type($r, $key), 'string', 'the claim is short');
# the short claim as the hash of its fields, its expiry kept
my %claim = IdemRecord::fields($r, $key);
Test::More::ok(defined $claim{o}, '... and holds the claim');
system("redis-cli -p $r eval '"
       . 'local ttl = redis.call("PTTL", KEYS[1]) '
       . 'redis.call("DEL", KEYS[1]) '
       . 'redis.call("HSET", KEYS[1], unpack(ARGV)) '
       . 'return redis.call("PEXPIRE", KEYS[1], ttl)'
       . "' 1 '$key' " . join(' ', map { "'$_'" } %claim) . " >/dev/null");
Test::More::is(IdemRecord::type($r, $key), 'hash', 'the record is a hash');
IdemWait::release('k-8');
my $dup = main::done('dup8');
Test::More::like($dup, qr{^HTTP/1\.1 200 }, 'the waiter: 200');
Test::More::like($dup, qr/^Idempotent-Replayed: true\r$/mi, '... replayed');
Test::More::like(main::done('owner8'), qr{^HTTP/1\.1 200 }, 'the owner: 200');
Test::More::is(IdemRecord::type($r, $key), 'hash', 'the record a hash');
my %f = IdemRecord::fields($r, $key);
Test::More::is(scalar(grep { /^k:/ && $f{$_} eq 'R' } keys %f), 1,
               'the answer stored');
# two PUBLISHes on the owner's gateway: with the write, and after it
my $n = () = IdemGateway::log_text($main::gw)
             =~ /PUBLISH "idem:wake" "\Qidem:c:{k-8}\E"/g;
Test::More::is($n, 2, 'the owner published twice');
Test::More::ok(IdemWait::log_count(
                   qr/idem dedupe: "k-8" woken by its owner's final write/)
               >= 1, "the waiter woken by its owner's final write");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_call_id_missing reject;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_wait 20s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request
GET /log/k-8
--- response_body_like chomp
^n=1 [^\n]*\n$
--- no_error_log
[error]
