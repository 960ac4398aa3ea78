# A duplicate whose claim got no answer (Redis paused with SIGSTOP past
# idem_redis's timeout) is answered 503 dedupe-unavailable, and writes no
# execution of its own: its claim may have been made (then its final write
# releases it), or the owner holds the call (then its record stays the
# owner's alone).  Issue 35: the duplicate's release used to add a FAILED
# execution while the owner was still in flight, which made the call read
# FAILED, and its resolution ("applied") refused once the owner ended
# UNKNOWN.  The same for a waiting duplicate (idem_dedupe_wait) whose poll
# is out when Redis pauses, or when its client goes.
#
# The owners run in the background (curl, from --- init) against the
# backend's /sleep (logged when it arrives, answered after 6 s), so that
# proxy_read_timeout (4 s) ends them UNKNOWN; the paused Redis is the
# tests' own (t/lib/RedisFault.pm).

BEGIN {
    if ($ENV{TEST_NGINX_USE_VALGRIND}) {
        require Test::More;
        Test::More::plan(skip_all => 'background requests across blocks, '
                                     . 'timed by Redis paused: not under '
                                     . 'valgrind');
    }
}

use lib 't/lib';
use POSIX ();
use Time::HiRes ();
use RedisFault;
use IdemRecord;
use IdemBg qw(bg done running);
use IdemPaths ();
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): fixed call ids, claimed in a set order while Redis is
# paused and resumed.

our $backend = "$ENV{TEST_NGINX_ROOT}/t/servroot-backend-"
              . $ENV{TEST_NGINX_BACKEND_PORT};

# waits (up to 10 s) until a file has a line that matches
sub wait_for {
    my ($file, $re) = @_;
    for (1 .. 1000) {
        if (open my $fh, '<', $file) {
            local $/;
            return 1 if (<$fh> // '') =~ $re;
        }
        Time::HiRes::sleep(0.01);
    }
    Test::More::fail("no $re in $file");
    return 0;
}

# bytes sent to the paused Redis wait unread in its socket: a command
# that nginx sent after the pause, whose answer cannot come before resume
sub unread {
    my $port = sprintf '%04X', $ENV{TEST_NGINX_REDIS_FAULT_PORT};
    for (1 .. 1000) {
        open my $fh, '<', '/proc/net/tcp' or last;
        for (<$fh>) {
            my @f = split;
            return 1 if $f[1] =~ /:$port$/ && $f[3] eq '01'
                        && hex((split /:/, $f[4])[1]) > 0;
        }
        Time::HiRes::sleep(0.01);
    }
    Test::More::fail('nothing waits unread in the paused Redis');
    return 0;
}

# the owner's request reached the backend: it holds the claim, in flight
sub owner_runs {
    my ($name, $id, $uri) = @_;
    bg($name, $id, $uri, '--data', 'x=1');
    wait_for("$backend/$id", qr/^n=1 /m);
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

# the executions in a record, as Redis holds it: their tokens
sub tokens {
    my ($id) = @_;
    my %f = IdemRecord::fields($ENV{TEST_NGINX_REDIS_FAULT_PORT},
                               "idem:c:{$id}");
    my %t = map { /^[ef]:(.+)$/ ? ($1 => 1) : () } keys %f;
    return (scalar(keys %t), $f{n} // 0);
}

# before nginx starts, so that its first connect succeeds
RedisFault::start();
system("redis-cli -p $ENV{TEST_NGINX_REDIS_FAULT_PORT} flushall >/dev/null");

# TEST 5 and 6 need a waiter whose poll is out when Redis pauses: this
# Redis refuses SUBSCRIBE, so that nothing wakes the waiters and they poll
# as they do while a subscription is down (t/114 has the woken ones)
system("redis-cli -p $ENV{TEST_NGINX_REDIS_FAULT_PORT} "
       . "acl setuser default -subscribe >/dev/null");

no_long_string();
no_shuffle();
run_tests();

END {
    IdemBg::stop_all();
    RedisFault::stop();
}

__DATA__

=== TEST 1: the owner of st-1 runs; Redis paused: a duplicate's claim times out, 503 dedupe-unavailable, nothing forwarded
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT timeout=1s;
--- config
    location /st {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_read_timeout 4s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/6000/1;
    }
    location /sw {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_wait 5s;
        proxy_read_timeout 4s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/6000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
main::owner_runs('st', 'st-1', '/st');
main::pause();
--- request
POST /st
x=1
--- more_headers
X-Call-Id: st-1
--- timeout: 5
--- error_code: 503
--- response_headers
Retry-After: 1
--- response_body_like chomp
"type":"urn:ngx-idem:problem:dedupe-unavailable"
--- no_error_log
[alert]
[crit]



=== TEST 2: Redis resumed: while the owner still runs, the record is its alone: PROCESSING, one execution
--- init
RedisFault::resume();
Test::More::ok(main::running('st'), 'the owner is still in flight');
--- request eval
["GET /calls/st-1", "GET /log/st-1"]
--- error_code eval
[200, 200]
--- response_body_like eval
['^\{"call_id":"st-1",.*"state":"PROCESSING",.*"executions":1,"attempts":\[\]\}$',
 '\An=1 [^\n]*\n\z']
--- no_error_log
[alert]
[crit]



=== TEST 3: the owner ends 504 (UNKNOWN): still one execution; the service's "applied" is taken
--- init
Test::More::like(main::done('st'), qr{^HTTP/1\.1 504 }, 'the owner: 504');
--- request eval
["GET /calls/st-1", "POST /calls/st-1\n{\"outcome\":\"applied\"}",
 "GET /calls/st-1", "POST /st\nx=1"]
--- more_headers eval
["", "", "", "X-Call-Id: st-1"]
--- error_code eval
[200, 200, 200, 409]
--- response_body_like eval
['^\{"call_id":"st-1",.*"state":"UNKNOWN",.*"final_status":504,"executions":1,"attempts":\[\{"execution":1,"n":1,[^\]]*\]\}$',
 '"state":"SUCCESS"',
 '"resolved":\{"execution":1,"outcome":"applied",.*"executions":1,',
 '"type":"urn:ngx-idem:problem:call-applied"']
--- no_error_log
[alert]
[crit]



=== TEST 4: ... in Redis: the owner's execution only, none counted after it
--- init
my ($n, $counted) = main::tokens('st-1');
Test::More::is($n, 1, 'st-1: one execution in the record');
Test::More::is($counted, 0, 'st-1: no execution counted after the first');
--- request
GET /log/st-1
--- response_body_like chomp
\An=1 [^\n]*\n\z
--- no_error_log
[alert]
[crit]



=== TEST 5: a waiting duplicate (idem_dedupe_wait) whose poll is out when Redis pauses: 503 dedupe-unavailable
--- init
main::owner_runs('sw1', 'sw-1', '/sw');
main::bg('waiter1', 'sw-1', '/sw', '--data', 'x=1');
main::wait_for(IdemPaths::error_log(),
               qr/idem dedupe: "sw-1" asks again/);
main::pause();
Test::More::like(main::done('waiter1'),
    qr{^HTTP/1\.1 503 .*"type":"urn:ngx-idem:problem:dedupe-unavailable"}s,
    'the waiter: 503 dedupe-unavailable');
RedisFault::resume();
Test::More::ok(main::running('sw1'), 'the owner is still in flight');
--- request eval
["GET /calls/sw-1", "GET /log/sw-1"]
--- error_code eval
[200, 200]
--- response_body_like eval
['^\{"call_id":"sw-1",.*"state":"PROCESSING",.*"executions":1,"attempts":\[\]\}$',
 '\An=1 [^\n]*\n\z']
--- no_error_log
[alert]
[crit]



=== TEST 6: a waiting duplicate whose client goes while its poll is out: nothing written for it
--- init
main::owner_runs('sw2', 'sw-2', '/sw');
my $waiter = main::bg('waiter2', 'sw-2', '/sw', '--data', 'x=1');
main::wait_for(IdemPaths::error_log(),
               qr/idem dedupe: "sw-2" asks again/);
main::pause();
main::unread();
kill 'TERM', $waiter;
main::done('waiter2');
main::wait_for(IdemPaths::servroot() . "/logs/access.log", qr{"POST /sw HTTP/1\.1" 499 });
RedisFault::resume();
Test::More::ok(main::running('sw2'), 'the owner is still in flight');
--- request eval
["GET /calls/sw-2", "GET /log/sw-2"]
--- error_code eval
[200, 200]
--- response_body_like eval
['^\{"call_id":"sw-2",.*"state":"PROCESSING",.*"executions":1,"attempts":\[\]\}$',
 '\An=1 [^\n]*\n\z']
--- no_error_log
[alert]
[crit]



=== TEST 7: both owners end 504 (UNKNOWN): one execution each
--- init
Test::More::like(main::done('sw1'), qr{^HTTP/1\.1 504 }, 'sw-1: 504');
Test::More::like(main::done('sw2'), qr{^HTTP/1\.1 504 }, 'sw-2: 504');
--- request eval
["GET /calls/sw-1", "GET /calls/sw-2"]
--- response_body_like eval
['^\{"call_id":"sw-1",.*"state":"UNKNOWN",.*"final_status":504,"executions":1,',
 '^\{"call_id":"sw-2",.*"state":"UNKNOWN",.*"final_status":504,"executions":1,']
--- no_error_log
[alert]
[crit]



=== TEST 8: ... in Redis too, none counted after the owner's
--- init
for my $id ('sw-1', 'sw-2') {
    my ($n, $counted) = main::tokens($id);
    Test::More::is($n, 1, "$id: one execution in the record");
    Test::More::is($counted, 0, "$id: no execution counted after the first");
}
--- request
GET /log/sw-2
--- response_body_like chomp
\An=1 [^\n]*\n\z
--- no_error_log
[alert]
[crit]



=== TEST 9: a durable claim whose answer never came (Redis paused): 503 dedupe-unavailable
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT timeout=1s;
--- config
    location /sd {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_durable replicas=1 timeout=100ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
main::pause();
--- request
POST /sd
x=1
--- more_headers
X-Call-Id: sd-1
--- timeout: 5
--- error_code: 503
--- response_body_like chomp
"type":"urn:ngx-idem:problem:dedupe-unavailable"
--- no_error_log
[alert]
[crit]



=== TEST 10: ... resumed, the claim it made is released by its final write, on the durable claims' connection: the id sent again claims again (refused as not durable: this Redis has no replica), not 409 in flight; nothing forwarded
--- init
RedisFault::resume();
my %f;
for (1 .. 1000) {
    %f = IdemRecord::fields($ENV{TEST_NGINX_REDIS_FAULT_PORT}, 'idem:c:{sd-1}');
    last if grep { /^k:/ && $f{$_} eq 'F' } keys %f;
    Time::HiRes::sleep(0.01);
}
Test::More::is(scalar(grep { /^k:/ && $f{$_} eq 'F' } keys %f), 1,
               'the claim that got no answer was made, and released');
Test::More::ok(defined $f{"f:$f{o}"}, '... by its own final write');
--- request eval
["POST /sd\nx=1", "GET /log/sd-1"]
--- more_headers eval
["X-Call-Id: sd-1", ""]
--- error_code eval
[503, 200]
--- response_body_like eval
['"type":"urn:ngx-idem:problem:claim-not-durable"', '\A\z']
--- no_error_log
[alert]
[crit]
