# idem_resend_limit_zone and idem_resend_limit: a cap on each client's
# resends of call ids already known (issue 39).  A resend is a request
# whose claim finds its call id known (in flight, or finished), or, on a
# record-only route, whose record is there (the arrival's reply says so;
# at the limit the record is read instead); beyond the limit it gets 429
# too-many-resends with Retry-After, nothing forwarded, nothing written,
# no waiter slot taken.  First calls are never limited
# nor counted.  The limits are counted per key (an IP, a header) in a
# shared zone; an empty key is not limited.  The rates here are per
# minute, so that no bucket leaks during a block; a refusal's Retry-After
# at 1r/m is 60 at most (one resend a minute, exactly).  TEST 12 waits a
# minute and more for real: a bucket leaks for as long as it was idle.
# Resends sent at once on a record-only route, each waiting for a paused
# Redis of the test's own (t/lib/RedisFault.pm): TEST 13, 14.  Two
# workers and reloads: t/121.  nginx -t's refusals: t/005.

use lib 't/lib';
use IdemBg qw(bg done);
use IdemWait ();
use RedisFault;
use Time::HiRes ();
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): fixed call ids and exact counters.

# Redis paused by TEST 13 and 14: started before their nginx, so that it
# finds it at once
RedisFault::start();

END { IdemBg::stop_all(); RedisFault::stop() }

# the status of a background call's answer (0: none)
sub status_of { done($_[0]) =~ m{^HTTP/1\.1 (\d+)} ? $1 : 0 }

# $n resends of call id $id sent at once (background calls "$name-1" ...)
# while Redis is paused, each waiting for its arrival's reply or its read,
# then Redis resumed: true when all $n were seen waiting
sub resends_at_once {
    my ($name, $id, $path, $key, $n) = @_;
    my $waits = qr/idem resend: "\Q$id\E": waits for the store/;
    my $before = IdemWait::log_count($waits);
    RedisFault::pause();
    bg("$name-$_", $id, $path, '--data', 'x=1', '-H', "X-Api-Key: $key")
        for 1 .. $n;
    my $all = IdemWait::wait_for("$n resends of $id waiting for Redis",
        sub { IdemWait::log_count($waits) >= $before + $n });
    RedisFault::resume();
    return Test::More::ok($all, "$n resends of $id at once, each waiting "
                                . 'for Redis');
}

# one POST of call id $id: its status, its Retry-After, when it was sent
# and when its answer came
sub post {
    my ($path, $id) = @_;
    my $sent = Time::HiRes::time();
    my $res = `curl -s -i -H 'X-Call-Id: $id' --data x=1 http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}$path`;
    my ($code) = $res =~ m{^HTTP/1\.1 (\d+)};
    my ($ra) = $res =~ m{^Retry-After: (\d+)}mi;
    return { code => $code // 0, ra => $ra, sent => $sent,
             got => Time::HiRes::time() };
}

no_long_string();
check_accum_error_log();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: a rate by client address: resends beyond rate and burst get 429, new ids go on
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_resend_limit_zone $binary_remote_addr zone=ip:1m rate=1r/m;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_resend_limit zone=ip burst=1;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1", "POST /pay\nx=1", "POST /pay\nx=1",
 "POST /pay\nx=1", "POST /pay\nx=1", "GET /metrics"]
--- more_headers eval
["X-Call-Id: rl-1", "X-Call-Id: rl-1", "X-Call-Id: rl-1", "X-Call-Id: rl-1",
 "X-Call-Id: rl-2", "X-Call-Id: rl-1", ""]
--- error_code eval
[200, 200, 200, 429, 200, 429, 200]
--- response_headers_like eval
["", "Idempotent-Replayed: true", "Idempotent-Replayed: true",
 "Retry-After: (?:5[89]|60)\nContent-Type: application/problem\\+json",
 "", "Retry-After: \\d+", ""]
--- response_body_like eval
["^n=1 ", "^n=1 ", "^n=1 ", '"type":"urn:ngx-idem:problem:too-many-resends"',
 "^n=1 ", "too-many-resends",
 qr/^idem_dedupe_total\{result="claimed"\} 2\n^idem_dedupe_total\{result="replayed"\} 2\n.*^idem_resends_refused_total 2\n/ms]
--- no_error_log
[error]



=== TEST 2: the 429: problem+json with the call id, Retry-After, no-store, nothing forwarded, the record untouched
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_resend_limit_zone $binary_remote_addr zone=ip:1m rate=1r/m;
--- config
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_resend_limit zone=ip;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location ~ ^/calls/(.+)$ {
        idem_status $1;
    }
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1", "POST /pay\nx=1", "GET /log/rl-3",
 "GET /calls/rl-3"]
--- more_headers eval
["X-Call-Id: rl-3", "X-Call-Id: rl-3", "X-Call-Id: rl-3", "", ""]
--- error_code eval
[200, 200, 429, 200, 200]
--- response_headers_like eval
["", "Idempotent-Replayed: true",
 "Retry-After: (?:5[89]|60)\nContent-Type: application/problem\\+json\nCache-Control: no-store\nX-Call-Id: rl-3",
 "", ""]
--- response_body_like eval
["^n=1 ", "^n=1 ",
 '^\{"type":"urn:ngx-idem:problem:too-many-resends","title":"Too many resends","status":429,"detail":"[^"]+","call_id":"rl-3"\}$',
 "^n=1 [^\n]*\n\$",
 '"state":"SUCCESS".*"executions":1,']
--- no_error_log
[error]



=== TEST 3: by a header: one client's resends are refused, another's go on; an empty key is not limited
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_resend_limit_zone $http_x_api_key zone=keys:1m rate=1r/m;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_resend_limit zone=keys;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1", "POST /pay\nx=1", "POST /pay\nx=1",
 "POST /pay\nx=1", "POST /pay\nx=1", "POST /pay\nx=1", "POST /pay\nx=1"]
--- more_headers eval
["X-Call-Id: rl-4\nX-Api-Key: a", "X-Call-Id: rl-4\nX-Api-Key: a",
 "X-Call-Id: rl-4\nX-Api-Key: a", "X-Call-Id: rl-4\nX-Api-Key: b",
 "X-Call-Id: rl-4\nX-Api-Key: a", "X-Call-Id: rl-4",
 "X-Call-Id: rl-4", "X-Call-Id: rl-4"]
--- error_code eval
[200, 200, 429, 200, 429, 200, 200, 200]
--- no_error_log
[error]



=== TEST 4: concurrent resends by client address: sequential resends each end before the next, so none is refused
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_resend_limit_zone $binary_remote_addr zone=ip:1m;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_resend_limit zone=ip concurrent=1;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1", "POST /pay\nx=1", "POST /pay\nx=1"]
--- more_headers eval
["X-Call-Id: rl-5", "X-Call-Id: rl-5", "X-Call-Id: rl-5", "X-Call-Id: rl-5"]
--- error_code eval
[200, 200, 200, 200]
--- response_headers_like eval
["", "Idempotent-Replayed: true", "Idempotent-Replayed: true",
 "Idempotent-Replayed: true"]
--- no_error_log
[error]



=== TEST 5: concurrent resends by a header on a route that waits: the second of one client is refused at once and holds no waiter slot; another client's waits
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_dedupe_wait_max 2;
    idem_resend_limit_zone $http_x_api_key zone=keys:1m;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_wait 10s;
        idem_resend_limit zone=keys concurrent=1;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
    location /metrics {
        idem_metrics;
    }
--- init
main::bg('owner5', 'rl-6', '/pay', '--data', 'x=1', '-H', 'X-Api-Key: o');
IdemWait::owner_in('rl-6');
main::bg('dup5', 'rl-6', '/pay', '--data', 'x=1', '-H', 'X-Api-Key: k');
IdemWait::parked_ok('rl-6', 1);
IdemWait::release_when('rl-6', \&IdemWait::parked, 2);
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1", "GET /metrics"]
--- more_headers eval
["X-Call-Id: rl-6\nX-Api-Key: k", "X-Call-Id: rl-6\nX-Api-Key: k2", ""]
--- error_code eval
[429, 200, 200]
--- response_headers_like eval
["Retry-After: 1\n", "Idempotent-Replayed: true", ""]
--- response_body_like eval
["too-many-resends", "^n=1 ",
 qr/^idem_dedupe_waits_total\{result="answered"\} 2\n^idem_dedupe_waits_total\{result="timed_out"\} 0\n^idem_dedupe_waits_total\{result="full"\} 0\n.*^idem_resends_refused_total 1\n/ms]
--- no_error_log
[error]



=== TEST 6: ... the first client's waiting resend got the replay; the owner ran once
--- init
Test::More::like(main::done('dup5'), qr{^HTTP/1\.1 200 .*Idempotent-Replayed: true}s,
                 'the waiting resend: the replay');
Test::More::like(main::done('owner5'), qr{^HTTP/1\.1 200 }, 'the owner: 200');
--- config
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request
GET /log/rl-6
--- response_body_like chomp
^n=1 [^\n]*\n$
--- no_error_log
[error]



=== TEST 7: a location without idem_resend_limit, and "off" in the zone's users' locations, are not limited
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_resend_limit_zone $binary_remote_addr zone=ip:1m rate=1r/m;
--- config
    idem_resend_limit zone=ip;
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /free {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_resend_limit off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1", "POST /pay\nx=1", "POST /free\nx=1",
 "POST /free\nx=1", "POST /free\nx=1"]
--- more_headers eval
["X-Call-Id: rl-7", "X-Call-Id: rl-7", "X-Call-Id: rl-7", "X-Call-Id: rl-8",
 "X-Call-Id: rl-8", "X-Call-Id: rl-8"]
--- error_code eval
[200, 200, 429, 200, 200, 200]
--- no_error_log
[error]



=== TEST 8: the error log says one line per key and second at most: 20 refusals in a row, no more lines than the seconds they spanned
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_resend_limit_zone $binary_remote_addr zone=ip:1m rate=1r/m;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_resend_limit zone=ip;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
my $url = "http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/pay";
my @codes;
my $t0 = time;
push @codes, map {
    `curl -s -o /dev/null -w '%{http_code}' -H 'X-Call-Id: rl-9' --data x=1 $url`
} 1 .. 22;
# the seconds the refusals spanned: on a loaded machine 22 curls may take
# more than two
my $secs = time - $t0 + 1;
Test::More::is("@codes", join(' ', 200, 200, (429) x 20),
               'a first call, a resend, then 20 refused');
my $n = IdemWait::log_count(qr/resend of call "rl-9" refused by idem_resend_limit_zone "ip": over its rate/);
Test::More::ok($n >= 1 && $n <= $secs,
               "$n line(s) for 20 refusals over $secs second(s)");
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: rl-10
--- error_code: 200
--- no_error_log
[error]



=== TEST 9: a record-only route: a known id (its record there) is a resend; beyond the limit 429, nothing forwarded or written; new ids go on
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_resend_limit_zone $binary_remote_addr zone=ip:1m rate=1r/m;
--- config
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /rec {
        idem on;
        idem_record on;
        idem_call_id_missing reject;
        idem_resend_limit zone=ip;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location ~ ^/calls/(.+)$ {
        idem_status $1;
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["POST /rec\nx=1", "POST /rec\nx=1", "POST /rec\nx=1", "POST /rec\nx=1",
 "POST /rec\nx=1", "GET /log/rl-11", "GET /calls/rl-11", "GET /metrics"]
--- more_headers eval
["X-Call-Id: rl-11", "X-Call-Id: rl-11", "X-Call-Id: rl-11",
 "X-Call-Id: rl-12", "X-Call-Id: rl-11", "", "", ""]
--- error_code eval
[200, 200, 429, 200, 429, 200, 200, 200]
--- response_headers_like eval
["", "", "Retry-After: (?:5[89]|60)\nContent-Type: application/problem\\+json",
 "", "Retry-After: \\d+", "", "", ""]
--- response_body_like eval
["^n=1 ", '\nn=2 [^\n]*\n$', "too-many-resends", "^n=1 ",
 "too-many-resends",
 "^n=1 [^\n]*\nn=2 [^\n]*\n\$", '"state":"SUCCESS".*"executions":2,',
 qr/^idem_resends_refused_total 2\n/m]
--- no_error_log
[error]



=== TEST 10: a record-only route without the limit's key (empty), or without the limit, is not limited
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_resend_limit_zone $http_x_api_key zone=keys:1m rate=1r/m;
--- config
    location /rec {
        idem on;
        idem_record on;
        idem_call_id_missing reject;
        idem_resend_limit zone=keys;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request eval
["POST /rec\nx=1", "POST /rec\nx=1", "POST /rec\nx=1", "POST /rec\nx=1",
 "POST /rec\nx=1"]
--- more_headers eval
["X-Call-Id: rl-13", "X-Call-Id: rl-13", "X-Call-Id: rl-13",
 "X-Call-Id: rl-13\nX-Api-Key: a", "X-Call-Id: rl-13\nX-Api-Key: a"]
--- error_code eval
[200, 200, 200, 200, 429]
--- response_body_like eval
["^n=1 ", '\nn=2 [^\n]*\n$', '\nn=3 [^\n]*\n$', '\nn=4 [^\n]*\n$',
 "too-many-resends"]
--- no_error_log
[error]



=== TEST 11: a record-only route: a client that goes while its arrival's reply, or its read at the limit, is awaited (Redis paused) leaves nothing waiting on it
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT timeout=5s;
    idem_resend_limit_zone $http_x_api_key zone=keys:1m rate=1r/m;
--- config
    location /rec {
        idem on;
        idem_record on;
        idem_call_id_missing reject;
        idem_resend_limit zone=keys;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
my $port = $ENV{TEST_NGINX_SERVER_PORT};
my $redis = "redis-cli -p $ENV{TEST_NGINX_REDIS_FAULT_PORT}";
my $curl = "curl -s -o /dev/null -w '%{http_code}' -H 'X-Api-Key: g'"
           . " --data x=1 http://127.0.0.1:$port/rec";
system("$redis flushall >/dev/null");
IdemWait::log_ok('nginx connected to its Redis',
                 qr/idem: redis "[^"]*": connected/);
# a first call and a resend: the key is at its limit
Test::More::is(`$curl -H 'X-Call-Id: rl-14'`, '200', 'a first call');
Test::More::is(`$curl -H 'X-Call-Id: rl-14'`, '200', 'a resend');
# the arrival's reply awaited (another key: room), then the read at the
# limit awaited: each client goes once its request is seen waiting; Redis
# stopped until both are seen gone, however long the calls take
RedisFault::pause();
for (['rl-15', 'h', 'arrival was written'], ['rl-14', 'g', 'record was read']) {
    my ($id, $key, $what) = @$_;
    my $waits = qr/idem resend: "\Q$id\E": waits for the store/;
    my $before = IdemWait::log_count($waits);
    my $pid = main::bg("gone-$id", $id, '/rec', '--data', 'x=1',
                       '-H', "X-Api-Key: $key");
    IdemWait::wait_for("$id waiting for Redis",
                       sub { IdemWait::log_count($waits) > $before });
    kill 'TERM', $pid;
    Test::More::is(main::status_of("gone-$id"), 0,
                   "a client gone while its $what");
}
Test::More::ok(IdemWait::wait_for('nginx to see both clients go', sub {
    IdemWait::log_count(qr/client prematurely closed connection/) >= 2
}), 'nginx saw both clients go');
# the pause ends: the replies find no request
RedisFault::resume();
Test::More::ok(IdemWait::wait_for('Redis answering again', sub {
    `$redis ping` =~ /PONG/
}), 'Redis answers again');
--- request
POST /rec
x=1
--- more_headers
X-Call-Id: rl-16
X-Api-Key: h
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 12: rate=1r/m: Retry-After is true (a resend sent then goes on), and a bucket idle past a minute leaks for all that time; this block waits about 63 s
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_resend_limit_zone $binary_remote_addr zone=ip:1m rate=1r/m;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_resend_limit zone=ip burst=1;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
my @r = map { main::post('/pay', 'rl-19') } 1 .. 4;
Test::More::is(join(' ', map { $_->{code} } @r), '200 200 200 429',
               'a first call, two resends (burst=1), then 429');
my ($b, $c) = @r[2, 3];
# the bucket holds one resend more than its burst: a minute of leak, less
# the time since the last resend counted
my $ra = $c->{ra} // 0;
Test::More::ok($ra <= 60 && $ra >= int(60 - ($c->{got} - $b->{sent})),
               "Retry-After $ra: a minute at most, less what has leaked");
# a resend after Retry-After, and more than a minute after the last one
# counted: the bucket leaked for all that time, not for a minute only
my $until = $b->{got} + 63;
$until = $c->{got} + $ra if $c->{got} + $ra > $until;
# a fixed wait: what is tested is the passing of time itself (the
# bucket leaks by the clock); no event can stand for it
Time::HiRes::sleep($until - Time::HiRes::time());
my $d = main::post('/pay', 'rl-19');
Test::More::is($d->{code}, 200, 'a resend after Retry-After goes on');
my $e = main::post('/pay', 'rl-19');
Test::More::is($e->{code}, 429, 'the next one, at once: 429');
# what the bucket holds now: two resends, less the leak of the idle time
# (more than 60 s) since the second one
my $ra_e = $e->{ra} // 0;
my ($lo, $hi) = (int(120 - ($e->{got} - $b->{sent})) - 1,
                 int(120 - ($d->{sent} - $b->{got})) + 2);
Test::More::ok($ra_e >= $lo && $ra_e <= $hi && $ra_e < 60,
               "Retry-After $ra_e: 120 s less the idle time ($lo to $hi)");
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: rl-19
--- error_code: 429
--- no_error_log
[error]



=== TEST 13: a record-only route, concurrent=1: ten resends at once (Redis slow) run one at the backend, the other nine get 429
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT timeout=30s;
    idem_resend_limit_zone $http_x_api_key zone=keys:1m;
--- config
    location /first {
        idem on;
        idem_record on;
        idem_call_id_missing reject;
        idem_resend_limit zone=keys concurrent=1;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /rec {
        idem on;
        idem_record on;
        idem_call_id_missing reject;
        idem_resend_limit zone=keys concurrent=1;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/20;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_FAULT_PORT} flushall >/dev/null");
IdemWait::log_ok('nginx connected to its Redis',
                 qr/idem: redis "[^"]*": connected/);
my $first = main::post('/first', 'rl-17');
Test::More::is($first->{code}, 200, 'the first call');
main::resends_at_once('c17', 'rl-17', '/rec', 'c', 10);
# each resend answered, or held at the backend (a run of it)
my %done;
IdemWait::wait_for('each resend answered or at the backend', sub {
    $done{$_} = 1 for grep { !$done{$_} && !IdemBg::running("c17-$_") }
                       1 .. 10;
    keys(%done) + IdemWait::backend_runs('rl-17') - 1 >= 10;
});
Test::More::is(IdemWait::backend_runs('rl-17'), 2,
               'one resend ran at the backend (beside the first call)');
my @refused = map { main::status_of("c17-$_") } sort keys %done;
Test::More::is("@refused", join(' ', (429) x 9), 'the other nine: 429');
IdemWait::release('rl-17');
my @ran = map { main::status_of("c17-$_") } grep { !$done{$_} } 1 .. 10;
Test::More::is("@ran", '200', 'the one that ran: 200');
--- request
POST /rec
x=1
--- more_headers
X-Call-Id: rl-17
X-Api-Key: c
--- error_code: 200
--- response_body_like chomp
^n=1 [^\n]*\nn=2 [^\n]*\nn=3 [^\n]*\n$
--- no_error_log
[error]



=== TEST 14: a record-only route, rate=1r/m burst=0: twenty resends at once (Redis slow): one goes on, nineteen get 429; the first call's count was given back
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT timeout=30s;
    idem_resend_limit_zone $http_x_api_key zone=keys:1m rate=1r/m;
--- config
    location /rec {
        idem on;
        idem_record on;
        idem_call_id_missing reject;
        idem_resend_limit zone=keys burst=0;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_FAULT_PORT} flushall >/dev/null");
IdemWait::log_ok('nginx connected to its Redis',
                 qr/idem: redis "[^"]*": connected/);
# the first call through the limited route: a new id, not counted
Test::More::is(`curl -s -o /dev/null -w '%{http_code}' -H 'X-Call-Id: rl-18' -H 'X-Api-Key: r' --data x=1 http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/rec`,
               '200', 'the first call');
main::resends_at_once('r18', 'rl-18', '/rec', 'r', 20);
my @codes = sort map { main::status_of("r18-$_") } 1 .. 20;
Test::More::is("@codes", join(' ', 200, (429) x 19),
               'one resend went on, nineteen got 429');
Test::More::is(IdemWait::backend_runs('rl-18'), 2,
               'the first call and one resend ran');
--- request
POST /rec
x=1
--- more_headers
X-Call-Id: rl-18
X-Api-Key: r
--- error_code: 429
--- response_headers_like chomp
Retry-After: (?:5[89]|60)
--- no_error_log
[error]
