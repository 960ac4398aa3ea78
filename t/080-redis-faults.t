# Redis faults, for real: not running at start, started, paused with
# SIGSTOP, resumed, stopped, restarted.  Record-only routes keep serving
# at once; the status endpoint says UNKNOWN, never NOT_FOUND; recording
# resumes by itself.  The blocks run in order on one nginx.

use lib 't/lib';
use IdemRecord;
use IdemWait ();
use RedisFault;
use Test::Nginx::Socket 'no_plan';

# Each block waits for what it needs of the Redis it stops and starts (the
# worker's log line, a write arrived), never a fixed time.

sub started {
    IdemWait::log_after('nginx is connected to Redis again',
                        qr/idem: redis "[^"]*": connected/,
                        \&RedisFault::start);
}

sub stopped {
    IdemWait::log_after('nginx saw the connection to Redis go',
                        qr/idem: redis "[^"]*": connection (?:lost|closed)/,
                        \&RedisFault::stop);
}

sub redis {
    my ($cmd) = @_;
    return scalar `redis-cli -p $ENV{TEST_NGINX_REDIS_FAULT_PORT} $cmd`;
}

# No repeat_each(2): the blocks claim fixed call ids while Redis is stopped
# and resumed in a set order; a second run finds them claimed.

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: Redis is not running when nginx starts: calls are served
--- init
RedisFault::stop();
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT connect_timeout=200ms timeout=300ms;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /t", "GET /t", "GET /t", "GET /calls/fault-down-1"]
--- more_headers
X-Call-Id: fault-down-1
--- timeout: 1
--- error_code eval
[200, 200, 200, 503]
--- response_headers_like eval
["", "", "", "Retry-After: 1"]
--- response_body_like eval
["n=1 ", "n=2 ", "n=3 ", '^\{"state":"UNKNOWN"\}$']
--- no_error_log
[alert]
[crit]
exited on signal



=== TEST 2: Redis starts: recording resumes by itself
--- init
main::started();
--- request eval
["GET /t", "GET /calls/fault-up-1"]
--- more_headers
X-Call-Id: fault-up-1
--- error_code eval
[200, 200]
--- response_body_like eval
["n=1 ", '"call_id":"fault-up-1",.*"state":"SUCCESS"']
--- no_error_log
[alert]
[crit]



=== TEST 3: Redis paused (SIGSTOP): calls are served at once, status is UNKNOWN
--- init
RedisFault::pause();
--- request eval
["GET /t", "GET /calls/fault-up-1"]
--- more_headers
X-Call-Id: fault-paused-1
--- timeout: 2
--- error_code eval
[200, 503]
--- response_body_like eval
["n=1 ", '^\{"state":"UNKNOWN"\}$']
--- no_error_log
[alert]
[crit]



=== TEST 4: Redis resumed (SIGCONT): what was written meanwhile arrives
--- init
RedisFault::resume();
Test::More::ok(IdemWait::wait_for('the write made while paused',
                   sub { main::redis("exists 'idem:c:{fault-paused-1}'") == 1 }),
               'the write made while paused arrived');
--- request eval
["GET /calls/fault-paused-1", "GET /calls/fault-up-1"]
--- error_code eval
[200, 200]
--- response_body_like eval
['"call_id":"fault-paused-1",.*"state":"SUCCESS"', '"state":"SUCCESS"']
--- no_error_log
[alert]
[crit]



=== TEST 5: Redis stopped mid-run: calls are served, status is UNKNOWN
--- init
main::stopped();
--- request eval
["GET /t", "GET /t", "GET /calls/fault-up-1"]
--- more_headers
X-Call-Id: fault-stopped-1
--- timeout: 1
--- error_code eval
[200, 200, 503]
--- response_body_like eval
["n=1 ", "n=2 ", '^\{"state":"UNKNOWN"\}$']
--- no_error_log
[alert]
[crit]
exited on signal



=== TEST 6: Redis restarted: recording resumes by itself
--- init
main::started();
--- request eval
["GET /t", "GET /calls/fault-restarted-1"]
--- more_headers
X-Call-Id: fault-restarted-1
--- error_code eval
[200, 200]
--- response_body_like eval
["n=1 ", '"call_id":"fault-restarted-1",.*"state":"SUCCESS","source":"client"']
--- no_error_log
[alert]
[crit]
exited on signal



=== TEST 7: dedupe with Redis up: claimed, then replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT connect_timeout=200ms timeout=300ms;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /calls/ {
        idem_status;
    }
--- init
Test::More::ok(IdemWait::wait_for('nginx connected to Redis',
                   sub { IdemWait::log_count(qr/idem: redis "[^"]*": connected/) }),
               'nginx is connected to Redis');
--- request eval
["POST /d\nx", "POST /d\nx"]
--- more_headers
X-Call-Id: fault-dd-up
--- error_code eval
[200, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true"]
--- response_body_like eval
["n=1 ", "n=1 "]
--- no_error_log
[error]



=== TEST 8: dedupe with Redis paused: 503 once the claim times out, nothing forwarded
--- init
RedisFault::pause();
--- request eval
["POST /d\nx", "GET /log/fault-dd-paused"]
--- more_headers eval
["X-Call-Id: fault-dd-paused", ""]
--- timeout: 2
--- error_code eval
[503, 200]
--- response_headers eval
["Retry-After: 1\nContent-Type: application/problem+json", ""]
--- response_body_like eval
['"type":"urn:ngx-idem:problem:dedupe-unavailable"', '\A\z']
--- no_error_log
[alert]
[crit]



=== TEST 9: Redis resumed: the claim that timed out was released, the call runs
--- init
RedisFault::resume();
Test::More::ok(IdemWait::wait_for('the claim released',
                   sub { my %f = IdemRecord::fields(
                             $ENV{TEST_NGINX_REDIS_FAULT_PORT},
                             'idem:c:{fault-dd-paused}');
                         grep { /^k:[0-9a-f]{16}$/ && $f{$_} eq 'F' }
                              keys %f }),
               'the claim that timed out is released in Redis');
--- request eval
["POST /d\nx", "POST /d\nx"]
--- more_headers
X-Call-Id: fault-dd-paused
--- error_code eval
[200, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true"]
--- response_body_like eval
['\An=1 [^\n]*\n\z', '\An=1 [^\n]*\n\z']
--- no_error_log
[alert]
[crit]



=== TEST 10: dedupe with Redis stopped: 503 at once, nothing forwarded
--- init
main::stopped();
--- request eval
["POST /d\nx", "GET /log/fault-dd-stopped"]
--- more_headers eval
["X-Call-Id: fault-dd-stopped", ""]
--- timeout: 1
--- error_code eval
[503, 200]
--- response_body_like eval
['"type":"urn:ngx-idem:problem:dedupe-unavailable"', '\A\z']
--- no_error_log
[alert]
[crit]
exited on signal



=== TEST 11: Redis restarted: a new call id is claimed (no script needed)
--- init
main::started();
--- request
POST /d
x
--- more_headers
X-Call-Id: fault-dd-noscript
--- error_code: 200
--- response_headers
!Idempotent-Replayed
--- response_body_like
^n=1 [^\n]*body=x$
--- no_error_log
[alert]
[crit]



=== TEST 12: Redis without the scripts: a duplicate, which needs one, is answered
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_FAULT_PORT} SCRIPT FLUSH >/dev/null");
system("redis-cli -p $ENV{TEST_NGINX_REDIS_FAULT_PORT} CONFIG RESETSTAT >/dev/null");
--- request eval
["POST /d\nx", "POST /d\ny", "GET /calls/fault-dd-noscript"]
--- more_headers
X-Call-Id: fault-dd-noscript
--- error_code eval
[200, 422, 200]
--- response_headers eval
["Idempotent-Replayed: true", "", ""]
--- response_body_like eval
['\An=1 [^\n]*\n\z', '"type":"urn:ngx-idem:problem:payload-mismatch"',
 '"call_id":"fault-dd-noscript",.*"state":"SUCCESS"']
--- no_error_log
[alert]
[crit]



=== TEST 13: clean up; the scripts were run by SHA1, sent once each after NOSCRIPT
--- init
my $stats = `redis-cli -p $ENV{TEST_NGINX_REDIS_FAULT_PORT} INFO commandstats`;
Test::More::like($stats, qr/^cmdstat_evalsha:calls=3,.*failed_calls=2\r?$/m,
                 "EVALSHA: two claims and a read, NOSCRIPT for the first of each");
Test::More::like($stats, qr/^cmdstat_eval:calls=2,/m,
                 "EVAL: the first claim and the read again, with their text");
RedisFault::stop();
--- config
    location /t {
        return 200 "done\n";
    }
--- request
GET /t
--- response_body
done
