# idem_dedupe_durable: nginx -t's refusals, and a durable route on a Redis
# of its own (a master on TEST_NGINX_REDIS_PORT + 450, started here, and
# a replica on + 451 that the blocks start, pause and resume): without a
# replica that confirms the claim the call is refused (503, nothing
# reaches the backend, util/backend.pl's /log/<id> stays empty), and the
# same id goes through once the replica is back; each refusal stays in
# the record as an execution that failed.  A failover through Sentinel:
# t/196-redis-sentinel-durable.t; a durable claim through ASK and MOVED:
# t/185-redis-cluster-faults.t.

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): claims of fixed call ids and counters that the blocks
# read exactly; a second run finds both from the first.
use lib 't/lib';
use IdemRecord;
use RedisSentinel ();

our ($Master, $Replica);

BEGIN {
    $Master = ($ENV{TEST_NGINX_REDIS_PORT} || 16379) + 450;
    $Replica = $Master + 1;
    $ENV{TEST_NGINX_DURABLE_MASTER} = $Master;
}

# a replica up and acknowledging the master's writes: WAIT counts it
sub replica_up {
    RedisSentinel::start_redis($Replica, $Master);
    RedisSentinel::wait_until(20, sub {
        RedisSentinel::replicated($Master)
    }) or die "the replica on $Replica does not acknowledge\n";
}

# a signal to one of these two redis-servers (RedisSentinel::pid checks
# that the pid is still theirs)
sub signal {
    my ($port, $sig) = @_;
    my $pid = RedisSentinel::pid($port) or return;
    kill $sig, $pid;
}

# the record's count of executions after the first, as Redis holds it
sub counted {
    my ($id, $want) = @_;
    Test::More::is({ IdemRecord::fields($Master, "idem:c:{$id}") }->{n} // '',
                   $want, "$id: \"n\" is $want in Redis");
}

END {
    local $?;
    signal($Replica, 'CONT');
    RedisSentinel::kill_node($_, 'KILL') for $Replica, $Master;
}

RedisSentinel::kill_node($_, 'KILL') for $Replica, $Master;
RedisSentinel::start_redis($Master);

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: refused where idem_dedupe is off
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_DURABLE_MASTER;
--- config
    location /t {
        idem on;
        idem_dedupe_durable replicas=1;
    }
--- must_die
--- error_log
"idem_dedupe_durable" is set where "idem_dedupe" is off



=== TEST 2: replicas=0 is refused
--- config
    location /t { idem_dedupe_durable replicas=0; }
--- must_die
--- error_log
invalid value "replicas=0" in "idem_dedupe_durable" directive, replicas must be a number from 1 to 255



=== TEST 3: replicas must be a number
--- config
    location /t { idem_dedupe_durable replicas=two; }
--- must_die
--- error_log
invalid value "replicas=two" in "idem_dedupe_durable" directive, replicas must be a number from 1 to 255



=== TEST 4: timeout=0 would make WAIT wait forever
--- config
    location /t { idem_dedupe_durable replicas=1 timeout=0; }
--- must_die
--- error_log
invalid parameter "timeout=0" in "idem_dedupe_durable" directive



=== TEST 5: an unknown parameter
--- config
    location /t { idem_dedupe_durable replicas=1 copies=2; }
--- must_die
--- error_log
invalid parameter "copies=2" in "idem_dedupe_durable" directive



=== TEST 6: replicas=N is required
--- config
    location /t { idem_dedupe_durable timeout=1s; }
--- must_die
--- error_log
"idem_dedupe_durable" needs "replicas=N" or "off"



=== TEST 7: twice in one block
--- config
    location /t {
        idem_dedupe_durable replicas=1;
        idem_dedupe_durable off;
    }
--- must_die
--- error_log
"idem_dedupe_durable" directive is duplicate



=== TEST 8: set in http{} it is inherited; "off" anywhere; dedupe routes only
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_DURABLE_MASTER;
    idem_dedupe_durable replicas=1 timeout=250ms;
--- config
    location /plain {
        idem on;
        return 200 "plain\n";
    }
    location /off {
        idem on;
        idem_dedupe_durable off;
        return 200 "off\n";
    }
--- request eval
["GET /plain", "GET /off"]
--- response_body eval
["plain\n", "off\n"]
--- no_error_log
[error]
[warn]



=== TEST 9: no replica: 503 claim-not-durable, nothing forwarded, released (the resend is claimed and refused again), counted; other routes served
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_DURABLE_MASTER timeout=300ms;
--- config
    location /w {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_durable replicas=1;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /q {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /metrics {
        idem_metrics;
    }
--- init
RedisSentinel::cli($main::Master, 'flushall');
--- request eval
["POST /w\nx=1", "GET /log/dur-1", "POST /w\nx=1", "POST /q\nx=1",
 "GET /metrics"]
--- more_headers eval
["X-Call-Id: dur-1", "", "X-Call-Id: dur-1", "X-Call-Id: dur-q1", ""]
--- error_code eval
[503, 200, 503, 200, 200]
--- response_headers eval
["Retry-After: 1\nContent-Type: application/problem+json\nX-Call-Id: dur-1",
 "", "Retry-After: 1", "!Idempotent-Replayed", ""]
--- response_body_like eval
['\A\{"type":"urn:ngx-idem:problem:claim-not-durable","title":"Claim not durable","status":503,.*"call_id":"dur-1"',
 '\A\z',
 '"type":"urn:ngx-idem:problem:claim-not-durable"',
 '\An=1 attempt=1 ',
 'idem_dedupe_total\{result="claimed"\} 1\n.*idem_dedupe_total\{result="not_durable"\} 2\n']
--- no_error_log
[error]



=== TEST 10: the claim was released: with the replica back, the same id runs once
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_DURABLE_MASTER timeout=300ms;
--- config
    location /w {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_durable replicas=1;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
main::replica_up();
--- request eval
["POST /w\nx=1", "POST /w\nx=1", "GET /log/dur-1"]
--- more_headers eval
["X-Call-Id: dur-1", "X-Call-Id: dur-1", ""]
--- error_code eval
[200, 200, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true", ""]
--- response_body_like eval
['\An=1 attempt=1 ', '\An=1 attempt=1 ', '\An=1 [^\n]*\n\z']
--- no_error_log
[error]



=== TEST 11: the replica paused (SIGSTOP): refused within the timeout; resumed: served once
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_DURABLE_MASTER timeout=300ms;
--- config
    location /w {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_durable replicas=1 timeout=200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
main::signal($main::Replica, 'STOP');
--- request eval
["POST /w\nx=2", "GET /log/dur-2"]
--- more_headers eval
["X-Call-Id: dur-2", ""]
--- timeout: 2
--- error_code eval
[503, 200]
--- response_body_like eval
['"type":"urn:ngx-idem:problem:claim-not-durable"', '\A\z']
--- no_error_log
[error]



=== TEST 12: resumed: the refused id is served, once
--- init
main::signal($main::Replica, 'CONT');
--- request eval
["POST /w\nx=2", "POST /w\nx=2", "GET /log/dur-2"]
--- more_headers eval
["X-Call-Id: dur-2", "X-Call-Id: dur-2", ""]
--- error_code eval
[200, 200, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true", ""]
--- response_body_like eval
['\An=1 attempt=1 ', '\An=1 attempt=1 ', '\An=1 [^\n]*\n\z']
--- no_error_log
[error]



=== TEST 13: the records: each refused claim is an execution that failed (503), the one that ran is the last; "n" counts the executions after the first
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_DURABLE_MASTER timeout=300ms;
--- config
    location /s/ { idem_status; }
--- init
main::counted('dur-1', 2);
main::counted('dur-2', 1);
--- request eval
["GET /s/dur-1", "GET /s/dur-2"]
--- response_body_like eval
['\A\{"call_id":"dur-1",[^\n]*"state":"SUCCESS",[^\n]*"final_status":200,"executions":3,"attempts":\[\{"execution":3,"n":1,',
 '\A\{"call_id":"dur-2",[^\n]*"state":"SUCCESS",[^\n]*"final_status":200,"executions":2,"attempts":\[\{"execution":2,"n":1,']
--- no_error_log
[error]
