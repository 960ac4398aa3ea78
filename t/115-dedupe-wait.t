# idem_dedupe_wait: a duplicate that finds its call in flight waits for
# it instead of 409, without blocking the worker, and then gets what a
# duplicate arriving afterwards would: the replay, 409 answer-not-stored
# or call-outcome-unknown, or the call to run itself when the owner's
# claim was released; 409 call-in-flight when its wait or its own budget
# runs out first.  The owner is sent in the background from --- init
# (curl), the duplicate is the block's request; the backend
# (util/backend.pl) holds a call id's first request until the test
# releases it (/hold/1) and counts every request of a call id (/log/ID).
# No block races a fixed sleep: a duplicate is sent once its owner is at
# the backend, and an owner is let go once its duplicates are parked (the
# debug line of each one's wait), so that a slow machine only makes the
# blocks slower.

# Not under valgrind: its nginx starts again for every block, while the
# owners sent from --- init run across blocks, and its slowness would
# decide the races of the timed blocks (make valgrind covers dedupe with
# t/100).
BEGIN {
    if ($ENV{TEST_NGINX_USE_VALGRIND}) {
        require Test::More;
        Test::More::plan(skip_all => 'background requests across blocks, '
                                     . 'timed: not under valgrind');
    }
}

use lib 't/lib';
use IdemGateway ();
use IdemWait ();
use IdemBg qw(bg done running);
use Time::HiRes ();
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): dedupe of fixed call ids and exact counters: the second
# run's calls are replays of the first run's.

# background calls (t/lib/IdemBg.pm): bg(), done(), running()

# the forked helpers that release an owner: ended at the file's end
our %helper;

# waits until the owner's request of call $id is at the backend (its
# claim made): a duplicate sent from then on finds the call in flight
# lets the owner of call $id go once $n duplicates are parked (for the
# block's request, sent after --- init), or at the deadline
sub release_when_parked {
    my ($id, $n) = @_;
    $helper{"release-$id"} = IdemWait::release_when($id, \&IdemWait::parked,
                                                    $n);
}

# a background client that goes once its request is parked: its curl is
# killed, and nginx has seen it go
sub gone {
    my ($name, $id, $uri, $n, $closed) = @_;
    my $pid = bg($name, $id, $uri, '--data', 'x=1');
    IdemWait::parked_ok($id, $n);
    kill 'TERM', $pid;
    done($name);
    Test::More::ok(IdemWait::wait_for("nginx to see the client of $id go",
                       sub { IdemWait::log_count($closed) >= 1 }),
                   "nginx saw the client of $id go");
}

END {
    IdemBg::stop_all();
    kill 'TERM', values %helper;
    IdemGateway::stop_all();
}

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: a duplicate sent while its call runs waits, and gets the owner's answer replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_wait 5s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
    location /metrics {
        idem_metrics;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
main::bg('owner1', 'w-1', '/pay', '--data', 'x=1');
IdemWait::owner_in('w-1');
main::release_when_parked('w-1', 1);
--- request eval
["POST /pay\nx=1", "GET /metrics"]
--- more_headers eval
["X-Call-Id: w-1", ""]
--- error_code eval
[200, 200]
--- response_headers_like eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
["^n=1 attempt=1 ", qr/^idem_dedupe_total\{result="claimed"\} 1\n.*^idem_dedupe_total\{result="replayed"\} 1\n.*^idem_dedupe_waits_total\{result="answered"\} 1\n^idem_dedupe_waits_total\{result="timed_out"\} 0\n^idem_dedupe_waits_total\{result="full"\} 0\n/ms]
--- no_error_log
[error]



=== TEST 2: ... the owner's own answer was the original (the backend ran once)
--- init
my $owner = main::done('owner1');
Test::More::like($owner, qr{^HTTP/1\.1 200 }, 'the owner: 200');
Test::More::unlike($owner, qr/Idempotent-Replayed/i, '... not a replay');
--- request
GET /log/w-1
--- response_body_like chomp
^n=1 [^\n]*\n$
--- no_error_log
[error]



=== TEST 3: the wait runs out first: 409 call-in-flight, with Retry-After and the Link
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_wait 300ms;
        idem_status_url /calls/;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
    location /metrics {
        idem_metrics;
    }
--- init
main::bg('owner3', 'w-3', '/pay', '--data', 'x=1');
IdemWait::owner_in('w-3');
--- request eval
["POST /pay\nx=1", "GET /metrics"]
--- more_headers eval
["X-Call-Id: w-3", ""]
--- error_code eval
[409, 200]
--- response_headers_like eval
["Retry-After: 1\nLink: </calls/w-3>; rel=\"status\"", ""]
--- response_body_like eval
['"type":"urn:ngx-idem:problem:call-in-flight"', qr/^idem_dedupe_waits_total\{result="answered"\} 0\n^idem_dedupe_waits_total\{result="timed_out"\} 1\n/m]
--- no_error_log
[error]



=== TEST 4: ... while the owner was held; let go, it ran once
--- init
IdemWait::release('w-3');
my $owner = main::done('owner3');
Test::More::like($owner, qr{^HTTP/1\.1 200 }, 'the owner: 200');
--- request
GET /log/w-3
--- response_body_like chomp
^n=1 [^\n]*\n$
--- no_error_log
[error]



=== TEST 5: the duplicate's own budget is shorter than the wait: it decides
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_wait 10s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
--- init
main::bg('owner5', 'w-5', '/pay', '--data', 'x=1');
IdemWait::owner_in('w-5');
$main::t0 = Time::HiRes::time();
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: w-5
X-Deadline-Ms: 300
--- error_code: 409
--- response_body_like chomp
"type":"urn:ngx-idem:problem:call-in-flight"
--- no_error_log
[error]



=== TEST 6: ... it was answered while the owner was held, long before the wait's 10 s
--- init
my $t = Time::HiRes::time() - $main::t0;
Test::More::cmp_ok($t, '<', 5, "the duplicate's budget decided ($t s)");
Test::More::ok(main::running('owner5'), 'the owner was still held');
IdemWait::release('w-5');
main::done('owner5');
--- request
GET /log/w-5
--- response_body_like chomp
^n=1 [^\n]*\n$
--- no_error_log
[error]



=== TEST 7: the owner ends UNKNOWN: the waiting duplicate gets 409 call-outcome-unknown with the record
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_wait 5s;
        proxy_read_timeout 2s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
--- init
main::bg('owner7', 'w-7', '/pay', '--data', 'x=1');
IdemWait::owner_in('w-7');
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: w-7
--- timeout: 10
--- error_code: 409
--- response_body_like chomp
"type":"urn:ngx-idem:problem:call-outcome-unknown".*"record":\{"call_id":"w-7",.*"state":"UNKNOWN"
--- error_log
idem dedupe: "w-7" in flight, waits
--- no_error_log
[alert]
[emerg]



=== TEST 8: the owner's answer was not stored (too large): 409 answer-not-stored
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_wait 5s;
        idem_dedupe_store_max 4;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
--- init
IdemWait::release('w-7');
main::done('owner7');
main::bg('owner8', 'w-8', '/pay', '--data', 'x=1');
IdemWait::owner_in('w-8');
main::release_when_parked('w-8', 1);
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: w-8
--- error_code: 409
--- response_body_like chomp
"type":"urn:ngx-idem:problem:answer-not-stored"
--- no_error_log
[error]



=== TEST 9: the owner's claim is released (its upstream said 503 with Retry-After): the waiting duplicate runs the call itself, once
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_wait 5s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1/status/503/2/1;
    }
    location /calls/ {
        idem_status;
    }
--- init
main::done('owner8');
main::bg('owner9', 'w-9', '/pay', '--data', 'x=1');
IdemWait::owner_in('w-9');
main::release_when_parked('w-9', 1);
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: w-9
--- error_code: 503
--- response_body_like chomp
^failing 2$
--- raw_response_headers_unlike
Idempotent-Replayed
--- no_error_log
[error]



=== TEST 10: ... two executions in the record, both let go ("try later" is never kept)
--- init
my $owner = main::done('owner9');
Test::More::like($owner, qr{^HTTP/1\.1 503 }, 'the owner: 503');
--- request
GET /calls/w-9
--- response_body_like chomp
"call_id":"w-9",.*"executions":2,
--- no_error_log
[error]



=== TEST 11: fifty duplicates wait on one owner: one execution, fifty replays of its answer
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_wait 30s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /metrics {
        idem_metrics;
    }
--- init
main::bg('owner11', 'w-11', '/pay', '--data', 'x=1');
IdemWait::owner_in('w-11');
main::bg("dup11-$_", 'w-11', '/pay', '--data', 'x=1') for 1 .. 50;
IdemWait::parked_ok('w-11', 50);
IdemWait::release('w-11');
my @dup = map { main::done("dup11-$_") } 1 .. 50;
my $owner = main::done('owner11');
my ($body) = $owner =~ /\r\n\r\n(.*)\z/s;
Test::More::like($owner, qr{^HTTP/1\.1 200 }, 'the owner: 200');
Test::More::is(scalar(grep { m{^HTTP/1\.1 200 } && /^Idempotent-Replayed: true\r$/mi } @dup),
               50, 'fifty replays');
Test::More::is(scalar(grep { /\r\n\r\n\Q$body\E\z/s } @dup), 50,
               '... of the owner\'s body');
--- request eval
["GET /log/w-11", "GET /metrics"]
--- response_body_like eval
["^n=1 [^\n]*\n\$", qr/^idem_dedupe_total\{result="replayed"\} 50\n.*^idem_dedupe_waits_total\{result="answered"\} 50\n/ms]
--- no_error_log
[error]



=== TEST 12: idem_dedupe_wait_max: a duplicate beyond it is answered 409 at once
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_dedupe_wait_max 1;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_wait 5s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
    location /metrics {
        idem_metrics;
    }
--- init
main::bg('owner12', 'w-12', '/pay', '--data', 'x=1');
IdemWait::owner_in('w-12');
main::bg('dup12', 'w-12', '/pay', '--data', 'x=1');
IdemWait::parked_ok('w-12', 1);
$main::t0 = Time::HiRes::time();
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: w-12
--- error_code: 409
--- response_body_like chomp
"type":"urn:ngx-idem:problem:call-in-flight"
--- error_log
in flight: 1 duplicates wait already in this worker
--- no_error_log
[error]



=== TEST 13: ... at once; the one that waited got the replay
--- init
my $t = Time::HiRes::time() - $main::t0;
Test::More::cmp_ok($t, '<', 2.5, "answered at once, not after the wait's 5 s ($t s)");
IdemWait::release('w-12');
my $d = main::done('dup12');
Test::More::like($d, qr/^Idempotent-Replayed: true\r$/mi, 'the waiter: a replay');
main::done('owner12');
--- request
GET /metrics
--- response_body_like chomp
idem_dedupe_waits_total\{result="answered"\} 1\nidem_dedupe_waits_total\{result="timed_out"\} 0\nidem_dedupe_waits_total\{result="full"\} 1\n
--- no_error_log
[error]



=== TEST 14: a client that closes while waiting is let go at once; the waiter's place is free again
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_dedupe_wait_max 1;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_wait 5s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
--- init
main::bg('owner14', 'w-14', '/pay', '--data', 'x=1');
IdemWait::owner_in('w-14');
main::gone('gone14', 'w-14', '/pay', 1,
           qr/client prematurely closed connection/);
main::release_when_parked('w-14', 2);
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: w-14
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
--- error_log
client prematurely closed connection
--- no_error_log
[error]



=== TEST 15: the wait of a duplicate on this gateway for its owner on another gateway
--- init
main::done('owner14');
$main::gw = $ENV{TEST_NGINX_SERVER_PORT} + 115;
IdemGateway::start($main::gw,
                   "idem_redis 127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}",
                   $ENV{TEST_NGINX_BACKEND_PORT}, hold => 1, wait => '5s');
main::bg('owner15', 'w-15', "http://127.0.0.1:$main::gw/d", '--data', 'x=1');
IdemWait::owner_in('w-15');
main::release_when_parked('w-15', 1);
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_call_id_missing reject;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_wait 5s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/700/1;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /d\nx=1", "GET /log/w-15"]
--- more_headers eval
["X-Call-Id: w-15", ""]
--- response_headers_like eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
["^n=1 attempt=1 ", "^n=1 [^\n]*\n\$"]
--- no_error_log
[error]



=== TEST 16: an owner whose gateway died: its waiters get 409 call-outcome-unknown once its lease lapses
--- init
main::done('owner15');
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
# as a gateway that died after its claim leaves it: o, d, its arrival, a
# lease that lapses 1.5 s from now (Redis's clock): long enough for the
# duplicate to be sent and parked on a slow machine
my ($s, $us) = split /\n/, `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} time`;
$main::t0 = Time::HiRes::time();
my $now = $s * 1000 + int($us / 1000);
my $d = `printf 'POST /pay\nx=1' | sha256sum`;
$d =~ s/\s.*//s;
system("redis-cli", "-p", $ENV{TEST_NGINX_REDIS_PORT}, "hset",
       "idem:c:{w-16}", "o", "tok16", "d", $d, "v", "1",
       "l:tok16", $now + 1500,
       "e:tok16", "P " . ($now - 100)
                  . " client gw-dead POST 4bf92f3577b34da6a3ce929d0e0e4736 /pay");
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} pexpire idem:c:{w-16} 60000 >/dev/null");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_wait 5s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: w-16
--- error_code: 409
--- response_body_like chomp
"type":"urn:ngx-idem:problem:call-outcome-unknown".*"node":"gw-dead"
--- error_log
idem dedupe: "w-16" in flight, waits
--- no_error_log
[error]



=== TEST 17: ... after the lease, not the wait (5 s)
--- init
my $t = Time::HiRes::time() - $main::t0;
Test::More::cmp_ok($t, '<', 4, "answered when the lease lapsed ($t s)");
Test::More::cmp_ok($t, '>', 1.4, '... not before');
--- request
GET /pay
--- more_headers
X-Call-Id: w-17
--- error_code: 200
--- no_error_log
[error]



=== TEST 18: an owner's answer idem_dedupe_replay leaves out: the waiting duplicate runs the call itself
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        idem_dedupe_wait 5s;
        idem_dedupe_replay 2xx;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1/status/500/2;
    }
    location /calls/ {
        idem_status;
    }
--- init
main::bg('owner18', 'w-18', '/pay', '--data', 'x=1');
IdemWait::owner_in('w-18');
main::release_when_parked('w-18', 1);
--- request eval
["POST /pay\nx=1", "GET /calls/w-18"]
--- more_headers eval
["X-Call-Id: w-18", ""]
--- error_code eval
[500, 200]
--- raw_response_headers_unlike eval
["Idempotent-Replayed", "^\$"]
--- response_body_like eval
["^failing 2\n", '"executions":2,']
--- no_error_log
[error]



=== TEST 18b: HTTP/2: a duplicate on an h2 stream waits for its owner's stream and gets the answer replayed (nginx's grpc_pass is the h2 client of both)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location /h2/pay {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_call_id_missing reject;
            idem_dedupe_wait 5s;
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
        }
        location /h2/metrics {
            idem_metrics;
        }
    }
--- config
    location /h2/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- init
main::bg('owner18b', 'w-18b', '/h2/pay', '--data', 'x=1');
IdemWait::owner_in('w-18b');
main::release_when_parked('w-18b', 1);
--- request eval
["POST /h2/pay\nx=1", "GET /h2/metrics"]
--- more_headers eval
["X-Call-Id: w-18b", ""]
--- error_code eval
[200, 200]
--- response_headers_like eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
["^n=1 attempt=1 ", qr/^idem_dedupe_waits_total\{result="answered"\} 1\n^idem_dedupe_waits_total\{result="timed_out"\} 0\n/m]
--- no_error_log
[error]



=== TEST 18c: ... the owner's stream got the original (the backend ran once)
--- config
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
my $owner = main::done('owner18b');
Test::More::like($owner, qr{^HTTP/1\.1 200 }, 'the owner: 200');
Test::More::unlike($owner, qr/Idempotent-Replayed/i, '... not a replay');
--- request
GET /log/w-18b
--- response_body_like chomp
^n=1 [^\n]*\n$
--- no_error_log
[error]



=== TEST 18d: HTTP/2: a waiting stream whose client goes is let go at once; the waiter's place is free again
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_dedupe_wait_max 1;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location /h2/pay {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_call_id_missing reject;
            idem_dedupe_wait 5s;
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
        }
    }
--- config
    location /h2/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- init
main::bg('owner18d', 'w-18d', '/h2/pay', '--data', 'x=1');
IdemWait::owner_in('w-18d');
main::gone('gone18d', 'w-18d', '/h2/pay', 1,
           qr/client prematurely closed connection.*POST \/h2\/pay HTTP\/2/);
main::release_when_parked('w-18d', 2);
--- request
POST /h2/pay
x=1
--- more_headers
X-Call-Id: w-18d
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
--- error_log eval
qr/client prematurely closed connection[^\n]*request: "POST \/h2\/pay HTTP\/2\.0"/
--- no_error_log
[error]



=== TEST 19: idem_dedupe_wait: a bad time is refused; off is accepted
--- config
    location /pay {
        idem_dedupe_wait soon;
    }
--- must_die
--- error_log
invalid value "soon" in "idem_dedupe_wait" directive, it must be a time greater than 0 or "off"



=== TEST 20: idem_dedupe_wait_max is an http directive, a number
--- http_config
    idem_dedupe_wait_max many;
--- config
    location /pay {
        idem_dedupe_wait off;
    }
--- must_die
--- error_log
"idem_dedupe_wait_max" directive invalid number
