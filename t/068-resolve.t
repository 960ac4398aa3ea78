# idem_status resolve=on: the service's word on a call that ended UNKNOWN
# goes back into its record.  POST <status location>/<call id> with
# {"outcome": "applied" | "not_applied", "receipt": "...", "by": "..."}
# resolves the latest execution, once: the call reads SUCCESS or FAILED
# with "resolved", and on a dedupe route a resend then runs again
# (not_applied) or gets 409 call-applied with the record (applied), never
# a second execution.  The backend (util/backend.pl) sleeps past
# proxy_read_timeout on a call id's first request (/sleep/MS/1): UNKNOWN;
# /log/ID counts a call id's executions.

use lib 't/lib';
use IdemRecord;
use Digest::SHA ();
use POSIX ();
use Time::HiRes ();
use IdemBg qw(bg done);
use IdemWait ();
use IdemPaths ();
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): an UNKNOWN call is resolved once; the second run's
# resolution of the same fixed id is a 409 by design.

# a resolution posted now: the whole answer
sub resolve {
    my ($id, $body) = @_;
    return scalar `curl -s -i --max-time 10 -X POST --data '$body' http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/calls/$id`;
}

# polls the status of a call until it matches (an event, not a fixed
# sleep: the machine may be slow); the last answer
sub status_until {
    my ($id, $re, $secs) = @_;
    my $until = Time::HiRes::time() + ($secs // 15);
    my $s = '';
    while (Time::HiRes::time() < $until) {
        $s = `curl -s --max-time 5 http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/calls/$id`;
        last if $s =~ $re;
        Time::HiRes::sleep(0.05);
    }
    return $s;
}

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: UNKNOWN, resolved applied: SUCCESS with "resolved"; the status read says so too
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1", "GET /calls/rs-1",
 "POST /calls/rs-1\n{\"outcome\": \"applied\", \"receipt\": \"pay_8f3a\", \"by\": \"recon-job\"}",
 "GET /calls/rs-1"]
--- more_headers
X-Call-Id: rs-1
--- error_code eval
[504, 200, 200, 200]
--- response_headers_like eval
["", "Content-Type: application/json", "Content-Type: application/json",
 "Content-Type: application/json"]
--- response_body_like eval
["", '"state":"UNKNOWN"',
 '^\{"call_id":"rs-1",[^{]*"state":"SUCCESS",.*"final_status":504,"resolved":\{"execution":1,"outcome":"applied","at_ms":1\d{12},"receipt":"pay_8f3a","by":"recon-job"\},"executions":1,"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"timeout"',
 '"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"applied",']
--- no_error_log
[alert]
[emerg]



=== TEST 2: not_applied: FAILED; "receipt" and "by" may be left out; a short record (one write) too
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        idem_record_arrival_delay 10s;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /pay", "POST /calls/rs-2\n{\"outcome\":\"not_applied\"}",
 "GET /calls/rs-2"]
--- more_headers
X-Call-Id: rs-2
--- error_code eval
[504, 200, 200]
--- response_body_like eval
["",
 '"state":"FAILED",.*"resolved":\{"execution":1,"outcome":"not_applied","at_ms":\d+,"receipt":null,"by":null\}',
 '"state":"FAILED",']
--- no_error_log
[alert]
[emerg]



=== TEST 3: once: a second resolution is 409 resolution-conflict, the first stands
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location /metrics {
        idem_metrics;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /pay", "POST /calls/rs-3\n{\"outcome\":\"not_applied\"}",
 "POST /calls/rs-3\n{\"outcome\":\"applied\"}", "GET /calls/rs-3",
 "GET /metrics"]
--- more_headers
X-Call-Id: rs-3
--- error_code eval
[504, 200, 409, 200, 200]
--- response_headers_like eval
["", "", "Content-Type: application/problem\\+json", "", ""]
--- response_body_like eval
["", '"outcome":"not_applied"',
 '^\{"type":"urn:ngx-idem:problem:resolution-conflict","title":"Not resolvable","status":409,"detail":"the call\'s latest execution is RESOLVED, not UNKNOWN: only an UNKNOWN one is resolved, once"\}$',
 '"state":"FAILED",.*"outcome":"not_applied"',
 qr/^idem_resolutions_total\{outcome="applied"\} 0\n^idem_resolutions_total\{outcome="not_applied"\} 1\n.*^idem_resolutions_refused_total\{reason="invalid"\} 0\n^idem_resolutions_refused_total\{reason="conflict"\} 1\n^idem_resolutions_refused_total\{reason="not_found"\} 0\n/ms]
--- no_error_log
[alert]
[emerg]



=== TEST 4: a call that succeeded is not resolved (409, its state named); no record: 404
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location /metrics {
        idem_metrics;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /pay", "POST /calls/rs-4\n{\"outcome\":\"not_applied\"}",
 "POST /calls/rs-none\n{\"outcome\":\"applied\"}", "GET /calls/rs-4",
 "GET /metrics"]
--- more_headers
X-Call-Id: rs-4
--- error_code eval
[200, 409, 404, 200, 200]
--- response_body_like eval
["n=1",
 '"detail":"the call\'s latest execution is SUCCESS, not UNKNOWN: only an UNKNOWN one is resolved, once"',
 '^\{"state":"NOT_FOUND"\}$', '^(?!.*resolved).*"state":"SUCCESS"',
 qr/^idem_resolutions_refused_total\{reason="conflict"\} 1\n^idem_resolutions_refused_total\{reason="not_found"\} 1\n/m]
--- no_error_log
[error]



=== TEST 5: bodies that are not a resolution: 400 invalid-resolution, nothing written
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status resolve=on;
    }
--- request eval
["POST /calls/rs-5\nnot json",
 "POST /calls/rs-5\n{\"outcome\":\"maybe\"}",
 "POST /calls/rs-5\n{\"outcome\":\"applied\",\"extra\":\"x\"}",
 "POST /calls/rs-5\n{\"outcome\":\"applied\",\"outcome\":\"applied\"}",
 "POST /calls/rs-5\n{\"outcome\":\"applied\",\"receipt\":\"pay 1\"}",
 "POST /calls/rs-5\n{\"outcome\":\"applied\",\"by\":\"a\\\\u0041\"}",
 "POST /calls/rs-5\n{\"outcome\":\"applied\"} x",
 "POST /calls/rs-5\n{\"receipt\":\"r1\"}",
 "POST /calls/rs-5\n{\"outcome\":\"applied\",\"by\":\"" . ("b" x 4100) . "\"}",
 "POST /calls/rs-5\n"]
--- error_code eval
[400, 400, 400, 400, 400, 400, 400, 400, 400, 400]
--- response_body_like eval
['"type":"urn:ngx-idem:problem:invalid-resolution","title":"Invalid resolution","status":400,"detail":"the body is not a JSON object"',
 '"detail":"\\\\"outcome\\\\" must be \\\\"applied\\\\" or \\\\"not_applied\\\\""',
 '"detail":"a member is none of \\\\"outcome\\\\", \\\\"receipt\\\\", \\\\"by\\\\", \\\\"force\\\\""',
 '"detail":"a member is given twice"',
 '"detail":"\\\\"receipt\\\\" and \\\\"by\\\\" take 1 to 128 of A-Z a-z 0-9 - . _ ~ :"',
 '"detail":"a value is not a plain string"',
 '"detail":"something follows the object"',
 '"detail":"\\\\"outcome\\\\" must be',
 '"detail":"the body is more than 4096 bytes"',
 '"detail":"the body is not a JSON object"']
--- no_error_log
[error]



=== TEST 6: POST where resolve is off (and by default): 405; a bad resolve= value and extra parameters at nginx -t
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
    location /calls-off/ {
        idem_status resolve=off;
    }
    location ~ ^/by-id/(.+)$ {
        idem_status $1 resolve=on;
    }
--- request eval
["POST /calls/rs-6\n{\"outcome\":\"applied\"}",
 "POST /calls-off/rs-6\n{\"outcome\":\"applied\"}",
 "POST /by-id/rs-6\n{\"outcome\":\"applied\"}", "GET /by-id/rs-6"]
--- error_code eval
[405, 405, 404, 404]
--- no_error_log
[error]



=== TEST 7: resolve=yes is refused
--- config
    location /calls/ {
        idem_status resolve=yes;
    }
--- must_die
--- error_log
invalid value "resolve=yes" in "idem_status" directive, it must be "resolve=on" or "resolve=off"



=== TEST 8: ... and so are two ids
--- config
    location /calls/ {
        idem_status $uri $uri;
    }
--- must_die
--- error_log
invalid parameter "$uri" in "idem_status" directive



=== TEST 9: a dedupe route, not_applied: the resend that got 409 call-outcome-unknown now runs, once
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1",
 "POST /calls/rs-9\n{\"outcome\":\"not_applied\",\"by\":\"ops:alice\"}",
 "POST /pay\nx=1", "POST /pay\nx=1", "GET /log/rs-9", "GET /calls/rs-9"]
--- more_headers
X-Call-Id: rs-9
--- error_code eval
[504, 409, 200, 200, 200, 200, 200]
--- response_headers_like eval
["", "", "", "", "Idempotent-Replayed: true", "", ""]
--- response_body_like eval
["", '"type":"urn:ngx-idem:problem:call-outcome-unknown"',
 '"outcome":"not_applied","at_ms":\d+,"receipt":null,"by":"ops:alice"',
 "n=2 attempt=1", "n=2 attempt=1", "^n=1 .*\nn=2 .*\n\$",
 '"state":"SUCCESS",.*"executions":2']
--- no_error_log
[alert]
[emerg]



=== TEST 10: a dedupe route, applied: a resend gets 409 call-applied with the record and its receipt, never runs
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /metrics {
        idem_metrics;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1",
 "POST /calls/rs-10\n{\"outcome\":\"applied\",\"receipt\":\"pay_77\"}",
 "POST /pay\nx=1", "GET /log/rs-10", "GET /metrics"]
--- more_headers
X-Call-Id: rs-10
--- error_code eval
[504, 200, 409, 200, 200]
--- response_body_like eval
["", '"outcome":"applied"',
 '^\{"type":"urn:ngx-idem:problem:call-applied","title":"Call applied","status":409,"detail":"an execution of this call id took effect, as the service resolved it; it is not run again: see its receipt","call_id":"rs-10","record":\{"call_id":"rs-10",.*"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"applied","at_ms":\d+,"receipt":"pay_77","by":null\}',
 "^n=1 [^\n]*\n\$",
 qr/^idem_dedupe_total\{result="applied"\} 1\n/m]
--- no_error_log
[alert]
[emerg]



=== TEST 11: a scope: the resolver's own scope finds the call; another scope's is 404
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope $http_authorization;
        idem_call_id_missing reject;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /calls/ {
        idem_dedupe_scope $http_authorization;
        idem_status resolve=on;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1", "POST /calls/rs-11\n{\"outcome\":\"applied\"}",
 "POST /calls/rs-11\n{\"outcome\":\"applied\"}"]
--- more_headers eval
["X-Call-Id: rs-11\nAuthorization: Bearer a",
 "Authorization: Bearer b", "Authorization: Bearer a"]
--- error_code eval
[504, 404, 200]
--- no_error_log
[alert]
[emerg]



=== TEST 12: the timeline page shows the resolution
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /pay", "POST /calls/rs-12\n{\"outcome\":\"applied\",\"receipt\":\"ord-9\",\"by\":\"job:7\"}",
 "GET /calls/rs-12"]
--- more_headers eval
["X-Call-Id: rs-12", "", "Accept: text/html"]
--- error_code eval
[504, 200, 200]
--- response_body_like eval
["", "", '<dt>Resolved</dt><dd>#1: applied, by <code>job:7</code> at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC, receipt <code>ord-9</code></dd>']
--- no_error_log
[alert]
[emerg]



=== TEST 13: Redis away: 503 UNKNOWN with Retry-After, nothing resolved
--- http_config
    idem_redis 127.0.0.1:1 connect_timeout=100ms timeout=200ms;
--- config
    location /calls/ {
        idem_status resolve=on;
    }
--- request
POST /calls/rs-13
{"outcome":"applied"}
--- error_code: 503
--- response_headers
Retry-After: 1
--- response_body
{"state":"UNKNOWN"}
--- no_error_log
[alert]
[emerg]



=== TEST 14: two resolvers at once: one wins, the other gets 409 (setup: an UNKNOWN call)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request
GET /pay
--- more_headers
X-Call-Id: rs-14
--- error_code: 504
--- no_error_log
[alert]
[emerg]



=== TEST 15: ... 8 resolvers, 4 of each outcome, at once: exactly one 200, seven 409, the record says the winner's
--- init
my $url = "http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/calls/rs-14";
my @pids;
my @out = map { IdemPaths::scratch() . "/rs14-$_" } 1 .. 8;
for my $i (1 .. 8) {
    my $o = $i % 2 ? 'applied' : 'not_applied';
    my $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        { exec('curl', '-s', '-o', $out[$i - 1], '-X', 'POST',
               '--data', qq{{"outcome":"$o","by":"r$i"}}, $url) };
        POSIX::_exit(1);
    }
    push @pids, $pid;
}
waitpid($_, 0) for @pids;
my @body = map { local (@ARGV, $/) = ($_); -e $_ ? <> : '' } @out;
my @ok = grep { $body[$_ - 1] =~ /"resolved"/ } 1 .. 8;
my @conflict = grep { $body[$_ - 1] =~ /resolution-conflict/ } 1 .. 8;
Test::More::is(scalar @ok, 1, 'one resolver won');
Test::More::is(scalar @conflict, 7, 'seven got 409');
my $winner = "r" . ($ok[0] // 0);
my $now = `curl -s $url`;
Test::More::like($now, qr/"resolved":\{"execution":1,"outcome":"(?:not_)?applied","at_ms":\d+,"receipt":null,"by":"$winner"\}/,
                 "the record has the winner's ($winner)");
--- request
GET /calls/rs-14
--- response_body_like chomp
"resolved":\{"execution":1,"outcome":"(?:not_)?applied","at_ms":\d+,"receipt":null,"by":"r[1-8]"\}
--- no_error_log
[alert]
[emerg]



=== TEST 16: a dedupe claim whose owner died (its lease and its bound passed, no final write) is resolved too; the resend then gets call-applied
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
    location /calls/ {
        idem_status resolve=on;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
# as a gateway that died after its claim leaves it: o, d, its arrival, a
# lease that lapsed a second ago and a bound that passed (Redis's clock)
my ($s, $us) = split /\n/, `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} time`;
my $now = $s * 1000 + int($us / 1000);
system("redis-cli", "-p", $ENV{TEST_NGINX_REDIS_PORT}, "hset",
       "idem:c:{rs-16}", "o", "tok16", "d", "ignored", "v", "1",
       "l:tok16", $now - 1000, "b:tok16", $now - 500,
       "e:tok16", "P " . ($now - 5000)
                  . " client gw-dead POST 4bf92f3577b34da6a3ce929d0e0e4736 /pay");
--- request eval
["GET /calls/rs-16", "POST /calls/rs-16\n{\"outcome\":\"applied\",\"receipt\":\"pay_16\"}",
 "GET /calls/rs-16"]
--- error_code eval
[200, 200, 200]
--- response_body_like eval
['"state":"UNKNOWN",.*"node":"gw-dead"',
 '"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"applied","at_ms":\d+,"receipt":"pay_16","by":null\}',
 '"state":"SUCCESS"']
--- no_error_log
[alert]
[emerg]



=== TEST 16b: ... a claim that does not say how long its owner runs (0.6.0's: no "b:"), lapsed: nothing bounds its owner, refused (409 resolution-too-early) until its final write
--- init
my ($s, $us) = split /\n/, `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} time`;
my $now = $s * 1000 + int($us / 1000);
system("redis-cli", "-p", $ENV{TEST_NGINX_REDIS_PORT}, "hset",
       "idem:c:{rs-16b}", "o", "tok16", "d", "ignored",
       "l:tok16", $now - 1000,
       "e:tok16", "P " . ($now - 5000)
                  . " client gw-old POST 4bf92f3577b34da6a3ce929d0e0e4736 /pay");
--- request eval
["GET /calls/rs-16b", "POST /calls/rs-16b\n{\"outcome\":\"not_applied\"}",
 "GET /calls/rs-16b"]
--- error_code eval
[200, 409, 200]
--- response_body_like eval
['"state":"UNKNOWN",.*"node":"gw-old"',
 '"type":"urn:ngx-idem:problem:resolution-too-early",.*nothing bounds its owner',
 '^(?!.*"resolved")\{.*"state":"UNKNOWN"']
--- no_error_log
[alert]
[emerg]



=== TEST 17: issue 35: a dedupe owner past its lease, no deadline: not_applied is refused (409 resolution-too-early, not settled), its 200 stands, the resend is replayed: one execution
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_lease 1s;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/3000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /metrics {
        idem_metrics;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
main::bg('owner17', 'late-1', '/pay', '--data', 'x=1');
Test::More::like(main::status_until('late-1', qr/"state":"UNKNOWN"/),
                 qr/"state":"UNKNOWN"/, 'the lease lapsed: UNKNOWN');
my $r = main::resolve('late-1', '{"outcome":"not_applied"}');
Test::More::like($r, qr{^HTTP/1.1 409 }, 'the resolution is refused');
Test::More::like($r, qr{\r\nContent-Type: application/problem\+json\r\n},
                 'problem+json');
Test::More::unlike($r, qr{\r\nRetry-After:}i, 'no bound: no Retry-After');
Test::More::like($r, qr{\r\n\r\n\{"type":"urn:ngx-idem:problem:resolution-too-early","title":"Owner may still answer","status":409,"detail":"the call's latest execution has no final state and its owner may still answer: its claim lapsed, but nothing bounds its owner \(no deadline, still running at it, or a claim that does not say\); only its final write settles it, or \\"force\\": true once its owner's gateway is known to be gone"},
                 'its body');
Test::More::like(main::done('owner17'), qr{^HTTP/1.1 200 }, "the owner's 200");
# its final write leaves after its answer (the log phase): waited for
Test::More::like(main::status_until('late-1', qr/"final_status":200/),
                 qr/"final_status":200/, "the owner's final write is in");
--- request eval
["GET /calls/late-1", "POST /pay\nx=1", "GET /log/late-1", "GET /metrics"]
--- more_headers
X-Call-Id: late-1
--- error_code eval
[200, 200, 200, 200]
--- response_headers_like eval
["", "Idempotent-Replayed: true", "", ""]
--- response_body_like eval
['^(?!.*"resolved")\{"call_id":"late-1",[^{]*"state":"SUCCESS",.*"final_status":200,"executions":1,',
 "^n=1 attempt=1 ", "^n=1 [^\n]*\n\$",
 qr/^idem_resolutions_refused_total\{reason="early"\} 1\n/m]
--- no_error_log
[error]
[alert]



=== TEST 18: ... no deadline, but a bound that passed (forged: as if the owner's word were lost): not_applied is taken, the owner's later 200 overrides it (shown), the resend is replayed: one execution
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_lease 1s;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/3000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
main::bg('owner18', 'late-2', '/pay', '--data', 'x=1');
Test::More::like(main::status_until('late-2', qr/"state":"UNKNOWN"/),
                 qr/"state":"UNKNOWN"/, 'the lease lapsed: UNKNOWN');
my @b = grep { /^b:/ } keys %{ { IdemRecord::fields($ENV{TEST_NGINX_REDIS_PORT},
                                'idem:c:{late-2}') } };
Test::More::is(scalar @b, 1, 'the claim has its bound');
IdemRecord::set_field($ENV{TEST_NGINX_REDIS_PORT}, "idem:c:{late-2}",
                      $b[0] // 'b:none', "1");
Test::More::like(main::resolve('late-2', '{"outcome":"not_applied"}'),
                 qr{^HTTP/1.1 200 .*"outcome":"not_applied"}s,
                 'its bound passed: resolved');
Test::More::like(main::done('owner18'), qr{^HTTP/1.1 200 }, "the owner's 200");
# its final write leaves after its answer (the log phase): waited for
Test::More::like(main::status_until('late-2', qr/"final_status":200/),
                 qr/"final_status":200/, "the owner's final write is in");
--- request eval
["GET /calls/late-2", "POST /pay\nx=1", "GET /log/late-2"]
--- more_headers
X-Call-Id: late-2
--- error_code eval
[200, 200, 200]
--- response_headers_like eval
["", "Idempotent-Replayed: true", ""]
--- response_body_like eval
['"state":"SUCCESS",.*"final_status":200,"resolved":\{"execution":1,"outcome":"not_applied","at_ms":\d+,"receipt":null,"by":null,"overridden":true\},"executions":1,',
 "^n=1 attempt=1 ", "^n=1 [^\n]*\n\$"]
--- no_error_log
[error]
[alert]



=== TEST 19: ... a deadline: refused (Retry-After) until it passed for certain; an owner still streaming its answer at its bound says so: refused until its final write (SUCCESS: resolution-conflict); one execution
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_lease 200ms;
        idem_deadline 2s;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/drip/10000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
my $t0 = Time::HiRes::time();
main::bg('owner19', 'late-3', '/pay', '--data', 'x=1');
Test::More::like(main::status_until('late-3', qr/"state":"UNKNOWN"/),
                 qr/"state":"UNKNOWN"/, 'the lease lapsed: UNKNOWN');
my $r = main::resolve('late-3', '{"outcome":"not_applied"}');
Test::More::like($r, qr{^HTTP/1.1 409 .*\r\nRetry-After: [1-8]\r\n}s,
                 'refused while the deadline may not have passed');
Test::More::like($r, qr{"type":"urn:ngx-idem:problem:resolution-too-early",.*"detail":"the call's latest execution has no final state and its owner may still answer: its claim lapsed, but its deadline passes for certain in \d+ ms; resolve it after that"}s,
                 'its body');
# asked again, as a resolver told Retry-After would, until it is not
# too early: past the bound (2 s and 5 s) the owner is still sending its
# answer's body (10 s), and has said so
my ($late, $taken);
while ($r =~ /resolution-too-early/ && Time::HiRes::time() < $t0 + 25) {
    Time::HiRes::sleep(0.1);
    $r = main::resolve('late-3', '{"outcome":"not_applied"}');
    $late //= $r if Time::HiRes::time() > $t0 + 8 && $r =~ /too-early/;
}
Test::More::like($late // '', qr{^HTTP/1.1 409 .*"detail":"the call's latest execution has no final state and its owner may still answer: its claim lapsed, but nothing bounds its owner}s,
                 'past its bound, the owner still running: refused');
Test::More::unlike($late // '', qr{\r\nRetry-After:}, '... with no Retry-After');
Test::More::like($r, qr{^HTTP/1.1 409 .*resolution-conflict.*is SUCCESS, not UNKNOWN}s,
                 'then its final write: SUCCESS, nothing to resolve');
Test::More::like(main::done('owner19'), qr{^HTTP/1.1 200 .*\r\n\r\nn=1 }s,
                 "the owner's 200");
# its final write leaves after its answer (the log phase): waited for
Test::More::like(main::status_until('late-3', qr/"final_status":200/),
                 qr/"final_status":200/, "the owner's final write is in");
--- request eval
["GET /calls/late-3", "POST /pay\nx=1", "GET /log/late-3"]
--- more_headers
X-Call-Id: late-3
--- error_code eval
[200, 200, 200]
--- response_headers_like eval
["", "Idempotent-Replayed: true", ""]
--- response_body_like eval
['^(?!.*"resolved").*"state":"SUCCESS",.*"final_status":200,"executions":1,',
 "^n=1 attempt=1 ", "^n=1 [^\n]*\n\$"]
--- no_error_log
[error]
[alert]



=== TEST 20: ... a not_applied found while the owner may still answer (as a 0.6.0 build with resolutions may write it; this version refuses it): a resend is not run (409 call-outcome-unknown), then gets the owner's answer: one execution
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_lease 1s;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/3000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
main::bg('owner20', 'late-4', '/pay', '--data', 'x=1');
Test::More::like(main::status_until('late-4', qr/"state":"UNKNOWN"/),
                 qr/"state":"UNKNOWN"/, 'the lease lapsed: UNKNOWN');
my ($b) = grep { /^b:/ } keys %{ { IdemRecord::fields($ENV{TEST_NGINX_REDIS_PORT},
                                'idem:c:{late-4}') } };
(my $t = $b // 'b:none') =~ s/^b://;
IdemRecord::set_field($ENV{TEST_NGINX_REDIS_PORT}, "idem:c:{late-4}",
                      "z:$t", "not_applied 1 - old-gw");
my $again = `curl -s -i --max-time 10 -H 'X-Call-Id: late-4' --data x=1 http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/pay`;
Test::More::like($again, qr{^HTTP/1.1 409 .*"type":"urn:ngx-idem:problem:call-outcome-unknown"}s,
                 'the resend is not run while the owner may answer');
Test::More::like(main::done('owner20'), qr{^HTTP/1.1 200 }, "the owner's 200");
# its final write leaves after its answer (the log phase): waited for
Test::More::like(main::status_until('late-4', qr/"final_status":200/),
                 qr/"final_status":200/, "the owner's final write is in");
--- request eval
["POST /pay\nx=1", "GET /log/late-4"]
--- more_headers
X-Call-Id: late-4
--- error_code eval
[200, 200]
--- response_headers_like eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
["^n=1 attempt=1 ", "^n=1 [^\n]*\n\$"]
--- no_error_log
[error]
[alert]



=== TEST 21: ... a deadline whose bound passed with no word from its owner (as if that write were lost): not_applied is taken; the owner's answer, streamed past it, overrides it; the resend is replayed: one execution
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_lease 200ms;
        idem_deadline 2s;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/drip/4000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
main::bg('owner21', 'late-5', '/pay', '--data', 'x=1');
Test::More::like(main::status_until('late-5', qr/"state":"UNKNOWN"/),
                 qr/"state":"UNKNOWN"/, 'the lease lapsed: UNKNOWN');
my ($b) = grep { /^b:/ } keys %{ { IdemRecord::fields($ENV{TEST_NGINX_REDIS_PORT},
                                'idem:c:{late-5}') } };
Test::More::ok($b, 'the claim has its bound');
IdemRecord::set_field($ENV{TEST_NGINX_REDIS_PORT}, "idem:c:{late-5}",
                      $b // 'b:none', "1");
Test::More::like(main::resolve('late-5', '{"outcome":"not_applied"}'),
                 qr{^HTTP/1.1 200 .*"outcome":"not_applied"}s,
                 'its bound passed: resolved');
Test::More::like(main::done('owner21'), qr{^HTTP/1.1 200 .*\r\n\r\nn=1 }s,
                 "the owner's 200, its body after the resolution");
# its final write leaves after its answer (the log phase): waited for
Test::More::like(main::status_until('late-5', qr/"overridden":true/),
                 qr/"overridden":true/, "the owner's final write is in");
--- request eval
["GET /calls/late-5", "POST /pay\nx=1", "GET /log/late-5"]
--- more_headers
X-Call-Id: late-5
--- error_code eval
[200, 200, 200]
--- response_headers_like eval
["", "Idempotent-Replayed: true", ""]
--- response_body_like eval
['"state":"SUCCESS",.*"final_status":200,"resolved":\{"execution":1,"outcome":"not_applied","at_ms":\d+,"receipt":null,"by":null,"overridden":true\},"executions":1,',
 "^n=1 attempt=1 ", "^n=1 [^\n]*\n\$"]
--- no_error_log
[error]
[alert]



=== TEST 22: a scoped call resolved by its scope's digest on an operators' location (scope_digest=on), without the scope's value; a client's location refuses the digest; the resend then gets call-applied
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope $http_authorization;
        idem_call_id_missing reject;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /calls/ {
        idem_dedupe_scope $http_authorization;
        idem_status resolve=on;
    }
    location /ops/calls/ {
        idem_dedupe_scope $http_authorization;
        idem_status resolve=on scope_digest=on;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
my $d = Digest::SHA::sha256_hex("Bearer a");
["POST /pay\nx=1",
 "POST /calls/rs-17?scope_digest=$d\n{\"outcome\":\"applied\"}",
 "POST /ops/calls/rs-17\n{\"outcome\":\"applied\"}",
 "POST /ops/calls/rs-17?scope_digest=$d\n{\"outcome\":\"applied\",\"by\":\"ops\"}",
 "GET /ops/calls/rs-17?scope_digest=$d",
 "POST /pay\nx=1"]
--- more_headers eval
["X-Call-Id: rs-17\nAuthorization: Bearer a", "Authorization: Bearer b", "",
 "", "", "X-Call-Id: rs-17\nAuthorization: Bearer a"]
--- error_code eval
[504, 400, 400, 200, 200, 409]
--- response_body_like eval
["", "invalid-scope-digest", "empty-dedupe-scope.*scope_digest=<hex SHA-256>",
 '"call_id":"rs-17",.*"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"applied","at_ms":\d+,"receipt":null,"by":"ops"\}',
 '"state":"SUCCESS"', "call-applied"]
--- no_error_log
[alert]
[emerg]



=== TEST 23: issue 45: "force" on a lapsed claim that does not say how long its owner runs (0.6.0's: no "b:"), its gateway gone: not_applied taken (forced, by, when), the resend runs once, then is replayed; counted
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
    location /calls/ {
        idem_status resolve=on;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /metrics {
        idem_metrics;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
# as 0.6.0's gateway leaves a claim when it dies: o, the digest of the
# call (POST /pay, x=1), a lease that lapsed, its arrival; no "b:", no "v"
my ($s, $us) = split /\n/, `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} time`;
my $now = $s * 1000 + int($us / 1000);
system("redis-cli", "-p", $ENV{TEST_NGINX_REDIS_PORT}, "hset",
       "idem:c:{rs-f1}", "o", "tokf1",
       "d", Digest::SHA::sha256_hex("POST /pay\nx=1"),
       "l:tokf1", $now - 1000,
       "e:tokf1", "P " . ($now - 5000)
                  . " client gw-gone POST 4bf92f3577b34da6a3ce929d0e0e4736 /pay");
my $again = `curl -s -i --max-time 10 -H 'X-Call-Id: rs-f1' --data x=1 http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/pay`;
Test::More::like($again, qr{^HTTP/1.1 409 .*call-outcome-unknown}s,
                 'before: the resend gets 409 call-outcome-unknown');
Test::More::like(main::resolve('rs-f1', '{"outcome":"not_applied"}'),
                 qr{^HTTP/1.1 409 .*resolution-too-early}s,
                 'before: a resolution is too early, for ever');
Test::More::like(main::resolve('rs-f1', '{"outcome":"not_applied","by":"ops-jane","force":true}'),
                 qr{^HTTP/1.1 200 .*\r\n\r\n\{"call_id":"rs-f1",[^\{]*"state":"FAILED",.*"node":"gw-gone",.*"resolved":\{"execution":1,"outcome":"not_applied","at_ms":1\d{12},"receipt":null,"by":"ops-jane","forced":true\},"executions":1,}s,
                 'forced: taken, and said so');
$again = `curl -s -i --max-time 10 -H 'X-Call-Id: rs-f1' --data x=1 http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/pay`;
Test::More::like($again, qr{^HTTP/1.1 200 .*\r\n\r\nn=1 }s, 'the resend runs');
Test::More::like(main::status_until('rs-f1', qr/"state":"SUCCESS"/),
                 qr/"state":"SUCCESS"/, 'its final write is in');
--- request eval
["GET /calls/rs-f1", "POST /pay\nx=1", "GET /log/rs-f1", "GET /metrics"]
--- more_headers
X-Call-Id: rs-f1
--- error_code eval
[200, 200, 200, 200]
--- response_headers_like eval
["", "Idempotent-Replayed: true", "", ""]
--- response_body_like eval
['"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"not_applied","at_ms":1\d{12},"receipt":null,"by":"ops-jane","forced":true\},"executions":2,',
 "^n=1 ", "^n=1 [^\n]*\n\$",
 qr/^idem_resolutions_total\{outcome="not_applied"\} 1\n.*^idem_resolutions_refused_total\{reason="early"\} 1\n.*^idem_resolutions_forced_total\{outcome="applied"\} 0\nidem_resolutions_forced_total\{outcome="not_applied"\} 1\n/ms]
--- no_error_log
[error]
[alert]



=== TEST 24: ... forced applied: the resend gets 409 call-applied with the forced resolution, never runs; the page says it was forced, by whom and when
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
    location /calls/ {
        idem_status resolve=on;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
my ($s, $us) = split /\n/, `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} time`;
my $now = $s * 1000 + int($us / 1000);
system("redis-cli", "-p", $ENV{TEST_NGINX_REDIS_PORT}, "hset",
       "idem:c:{rs-f2}", "o", "tokf2",
       "d", Digest::SHA::sha256_hex("POST /pay\nx=1"),
       "l:tokf2", $now - 1000,
       "e:tokf2", "P " . ($now - 5000)
                  . " client gw-gone POST 4bf92f3577b34da6a3ce929d0e0e4736 /pay");
--- request eval
["POST /calls/rs-f2\n{\"force\": true, \"outcome\":\"applied\",\"receipt\":\"pay_f2\",\"by\":\"ops:7\"}",
 "POST /pay\nx=1", "GET /log/rs-f2", "GET /calls/rs-f2"]
--- more_headers eval
["", "X-Call-Id: rs-f2", "", "Accept: text/html"]
--- error_code eval
[200, 409, 200, 200]
--- response_body_like eval
['"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"applied","at_ms":\d+,"receipt":"pay_f2","by":"ops:7","forced":true\}',
 '"type":"urn:ngx-idem:problem:call-applied",.*"resolved":\{"execution":1,"outcome":"applied","at_ms":\d+,"receipt":"pay_f2","by":"ops:7","forced":true\}',
 '^\z',
 '<dt>Resolved</dt><dd>#1: applied, forced \(its owner\'s gateway taken to be gone\), by <code>ops:7</code> at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC, receipt <code>pay_f2</code></dd>']
--- no_error_log
[error]
[alert]



=== TEST 25: ... a call without a deadline whose owner still runs past its lease: nothing bounds it, "force" is taken all the same (applied); the resend gets 409 call-applied; the owner's 200, come later, overrides it (shown, forced); one execution
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_lease 1s;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
main::bg('ownerf3', 'rs-f3', '/pay', '--data', 'x=1');
Test::More::ok(IdemWait::wait_for('the owner at the backend',
                                  sub { IdemWait::backend_runs('rs-f3') >= 1 }),
               'the owner at the backend');
Test::More::like(main::status_until('rs-f3', qr/"state":"UNKNOWN"/),
                 qr/"state":"UNKNOWN"/, 'the lease lapsed: UNKNOWN');
Test::More::like(main::resolve('rs-f3', '{"outcome":"applied"}'),
                 qr{^HTTP/1.1 409 .*resolution-too-early}s,
                 'without force: too early');
Test::More::like(main::resolve('rs-f3', '{"outcome":"applied","by":"ops","force":true}'),
                 qr{^HTTP/1.1 200 .*"resolved":\{"execution":1,"outcome":"applied","at_ms":\d+,"receipt":null,"by":"ops","forced":true\}}s,
                 'forced: taken');
my $again = `curl -s -i --max-time 10 -H 'X-Call-Id: rs-f3' --data x=1 http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/pay`;
Test::More::like($again, qr{^HTTP/1.1 409 .*call-applied}s,
                 'the resend gets 409 call-applied, not run');
Test::More::ok(IdemWait::release('rs-f3'), 'the owner released');
Test::More::like(main::done('ownerf3'), qr{^HTTP/1.1 200 }, "the owner's 200");
Test::More::like(main::status_until('rs-f3', qr/"overridden"/),
                 qr/"overridden"/, "the owner's final write is in");
--- request eval
["GET /calls/rs-f3", "POST /pay\nx=1", "GET /log/rs-f3"]
--- more_headers
X-Call-Id: rs-f3
--- error_code eval
[200, 409, 200]
--- response_body_like eval
['"state":"SUCCESS",.*"final_status":200,"resolved":\{"execution":1,"outcome":"applied","at_ms":\d+,"receipt":null,"by":"ops","forced":true,"overridden":true\},"executions":1,',
 "call-applied", "^n=1 [^\n]*\n\$"]
--- no_error_log
[error]
[alert]



=== TEST 26: "force" never overrides a final write: an UNKNOWN one (a timeout) and a SUCCESS are refused (409 resolution-force-refused, the state named, nothing written), the UNKNOWN one is then resolved without it; a claim still in its lease: 409 resolution-conflict; counted
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /ok {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /held {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_lease 60s;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location /metrics {
        idem_metrics;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
# a timeout (UNKNOWN) and a success, each with its final write in
`curl -s --max-time 10 -H 'X-Call-Id: rs-f4' http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/pay`;
Test::More::like(main::status_until('rs-f4', qr/"state":"UNKNOWN"/),
                 qr/"state":"UNKNOWN",.*"final_status":504/, 'UNKNOWN, written');
`curl -s --max-time 10 -H 'X-Call-Id: rs-f5' http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/ok`;
Test::More::like(main::status_until('rs-f5', qr/"state":"SUCCESS"/),
                 qr/"state":"SUCCESS"/, 'SUCCESS, written');
# a claim in its lease (60 s), its owner held
main::bg('ownerf4', 'rs-f6', '/held', '--data', 'x=1');
Test::More::ok(IdemWait::wait_for('the owner at the backend',
                                  sub { IdemWait::backend_runs('rs-f6') >= 1 }),
               'the owner at the backend');
my $r = main::resolve('rs-f6', '{"outcome":"not_applied","force":true}');
Test::More::like($r, qr{^HTTP/1.1 409 .*"type":"urn:ngx-idem:problem:resolution-conflict",.*"detail":"the call's latest execution is (?:PROCESSING|RECEIVED), not UNKNOWN: only an UNKNOWN one is resolved, once \(a forced one too: its claim must have lapsed\)"}s,
                 'in its lease: refused');
Test::More::ok(IdemWait::release('rs-f6'), 'the owner released');
Test::More::like(main::done('ownerf4'), qr{^HTTP/1.1 200 }, "the owner's 200");
--- request eval
["POST /calls/rs-f4\n{\"outcome\":\"not_applied\",\"force\":true}",
 "GET /calls/rs-f4",
 "POST /calls/rs-f4\n{\"outcome\":\"not_applied\"}",
 "POST /calls/rs-f5\n{\"outcome\":\"not_applied\",\"force\":true}",
 "GET /calls/rs-f5", "GET /metrics"]
--- error_code eval
[409, 200, 200, 409, 200, 200]
--- response_headers_like eval
["Content-Type: application/problem\\+json", "", "",
 "Content-Type: application/problem\\+json", "", ""]
--- response_body_like eval
['^\{"type":"urn:ngx-idem:problem:resolution-force-refused","title":"Force refused","status":409,"detail":"the call\'s latest execution has a final write \(UNKNOWN\): its owner said how it ended, and force never overrides that; resolve an UNKNOWN one without force"\}',
 '^(?!.*"resolved").*"state":"UNKNOWN"',
 '"state":"FAILED",.*"resolved":\{"execution":1,"outcome":"not_applied","at_ms":\d+,"receipt":null,"by":null\},',
 '"type":"urn:ngx-idem:problem:resolution-force-refused",.*"detail":"the call\'s latest execution has a final write \(SUCCESS\):',
 '^(?!.*"resolved").*"state":"SUCCESS"',
 qr/^idem_resolutions_total\{outcome="applied"\} 0\nidem_resolutions_total\{outcome="not_applied"\} 1\n.*^idem_resolutions_refused_total\{reason="conflict"\} 1\n.*^idem_resolutions_refused_total\{reason="final_write"\} 2\n.*^idem_resolutions_forced_total\{outcome="applied"\} 0\nidem_resolutions_forced_total\{outcome="not_applied"\} 0\n/ms]
--- no_error_log
[alert]
[emerg]



=== TEST 27: "force" takes true alone: false, a string, a number, null and twice are 400 invalid-resolution, nothing written; true is a resolution (no record: 404)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status resolve=on;
    }
--- request eval
["POST /calls/rs-f7\n{\"outcome\":\"applied\",\"force\":false}",
 "POST /calls/rs-f7\n{\"outcome\":\"applied\",\"force\":\"true\"}",
 "POST /calls/rs-f7\n{\"outcome\":\"applied\",\"force\":1}",
 "POST /calls/rs-f7\n{\"outcome\":\"applied\",\"force\":null}",
 "POST /calls/rs-f7\n{\"outcome\":\"applied\",\"force\":truely}",
 "POST /calls/rs-f7\n{\"outcome\":\"applied\",\"force\":true,\"force\":true}",
 "POST /calls/rs-f7\n{\"outcome\":\"applied\",\"by\":true}",
 "POST /calls/rs-f7\n{\"force\":true}",
 "POST /calls/rs-f7\n{\"outcome\":\"applied\",\"force\":true}"]
--- error_code eval
[400, 400, 400, 400, 400, 400, 400, 400, 404]
--- response_body_like eval
['"type":"urn:ngx-idem:problem:invalid-resolution",.*"detail":"\\\\"force\\\\" takes true alone \(left out: not forced\)"',
 '"detail":"\\\\"force\\\\" takes true alone',
 '"detail":"\\\\"force\\\\" takes true alone',
 '"detail":"\\\\"force\\\\" takes true alone',
 '"detail":"\\\\"force\\\\" takes true alone',
 '"detail":"a member is given twice"',
 '"detail":"a value is not a plain string"',
 '"detail":"\\\\"outcome\\\\" must be',
 '^\{"state":"NOT_FOUND"\}']
--- no_error_log
[error]



=== TEST 28: the page's form (issue 47): an UNKNOWN call's page on a resolve=on location carries it; posted (applied), 303 to the page, which says who resolved it; the resend gets 409 call-applied, never runs
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_call_id_missing reject;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1", "GET /calls/rs-28",
 "POST /calls/rs-28\noutcome=applied&receipt=pay_28&by=ops%3Ajane",
 "GET /calls/rs-28", "POST /pay\nx=1", "GET /log/rs-28"]
--- more_headers eval
["X-Call-Id: rs-28", "Accept: text/html",
 "Accept: text/html\nContent-Type: application/x-www-form-urlencoded\nOrigin: http://localhost\nSec-Fetch-Site: same-origin",
 "Accept: text/html", "X-Call-Id: rs-28", ""]
--- error_code eval
[504, 200, 303, 200, 409, 200]
--- response_headers_like eval
["", "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
 "Location: http://localhost(:\\d+)?/calls/rs-28\nCache-Control: no-store", "", "", ""]
--- response_body_like eval
["",
 '<form method="post" class="resolve">\n.*<input type="text" name="receipt" maxlength="128" autocomplete="off">.*<input type="text" name="by" maxlength="128" autocomplete="off">.*<input type="checkbox" name="force" value="true">.*<button name="outcome" value="applied" class="applied">.*<button name="outcome" value="not_applied" class="not_applied">.*</form>\n<h2>Timeline</h2>',
 "^Resolved: see the call's page.\n\$",
 '^(?!.*<form).*<h1 class="state s-SUCCESS">SUCCESS</h1>.*<dt>Resolved</dt><dd>#1: applied, by <code>ops:jane</code> at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC, receipt <code>pay_28</code></dd>',
 '"type":"urn:ngx-idem:problem:call-applied",.*"receipt":"pay_28","by":"ops:jane"',
 "^n=1 [^\n]*\n\$"]
--- no_error_log
[alert]
[emerg]



=== TEST 29: ... not_applied with the form's empty fields (left out), under a scope's digest: the 303 keeps it; the resend runs
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope $http_authorization;
        idem_call_id_missing reject;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /ops/calls/ {
        idem_dedupe_scope $http_authorization;
        idem_status resolve=on scope_digest=on;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
my $d = Digest::SHA::sha256_hex('Bearer z');
["POST /pay\nx=1", "POST /ops/calls/rs-29?scope_digest=$d\noutcome=not_applied&receipt=&by=",
 "GET /ops/calls/rs-29?scope_digest=$d", "POST /pay\nx=1"]
--- more_headers eval
["X-Call-Id: rs-29\nAuthorization: Bearer z",
 "Content-Type: application/x-www-form-urlencoded; charset=UTF-8", "",
 "X-Call-Id: rs-29\nAuthorization: Bearer z"]
--- error_code eval
[504, 303, 200, 200]
--- response_headers_like eval
["", "Location: http://localhost(:\\d+)?/ops/calls/rs-29\\?scope_digest=" . Digest::SHA::sha256_hex('Bearer z'), "", ""]
--- response_body_like eval
["", "", '"state":"FAILED",.*"resolved":\{"execution":1,"outcome":"not_applied","at_ms":\d+,"receipt":null,"by":null\}',
 "n=2 attempt=1"]
--- no_error_log
[alert]
[emerg]



=== TEST 30: a form that is not a resolution: 400 invalid-resolution (problem+json; a page for a browser), nothing written; a form on a call that is not UNKNOWN: 409 resolution-conflict
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /ok {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status resolve=on;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1", "POST /calls/rs-30\noutcome=maybe",
 "POST /calls/rs-30\noutcome=applied&color=red",
 "POST /calls/rs-30\noutcome=applied&outcome=not_applied",
 "POST /calls/rs-30\noutcome=applied&force=on",
 "POST /calls/rs-30\noutcome=applied&receipt=a%20b",
 "POST /calls/rs-30\noutcome=applied&by",
 "POST /calls/rs-30\noutcome=applied&receipt=%3Cb%3E",
 "POST /calls/rs-30\nreceipt=r1",
 "GET /calls/rs-30", "GET /ok", "POST /calls/rs-30ok\noutcome=applied"]
--- more_headers eval
["X-Call-Id: rs-30",
 "Content-Type: application/x-www-form-urlencoded",
 "Content-Type: application/x-www-form-urlencoded",
 "Content-Type: application/x-www-form-urlencoded",
 "Content-Type: application/x-www-form-urlencoded",
 "Content-Type: application/x-www-form-urlencoded",
 "Content-Type: application/x-www-form-urlencoded",
 "Content-Type: application/x-www-form-urlencoded\nAccept: text/html",
 "Content-Type: application/x-www-form-urlencoded",
 "", "X-Call-Id: rs-30ok",
 "Content-Type: application/x-www-form-urlencoded\nAccept: text/html"]
--- error_code eval
[504, 400, 400, 400, 400, 400, 400, 400, 400, 200, 200, 409]
--- response_headers_like eval
["", "Content-Type: application/problem\\+json", "", "", "", "", "",
 "Content-Type: text/html; charset=utf-8", "", "", "",
 "Content-Type: text/html; charset=utf-8"]
--- response_body_like eval
["",
 '"type":"urn:ngx-idem:problem:invalid-resolution",.*"detail":"\\\\"outcome\\\\" must be \\\\"applied\\\\" or \\\\"not_applied\\\\""',
 '"detail":"a form field is none of \\\\"outcome\\\\", \\\\"receipt\\\\", \\\\"by\\\\", \\\\"force\\\\""',
 '"detail":"a field is given twice"',
 '"detail":"\\\\"force\\\\" takes true alone',
 '"detail":"\\\\"receipt\\\\" and \\\\"by\\\\" take 1 to 128',
 '"detail":"a form field has no value"',
 '<h1 class="state s-other">Invalid resolution</h1>.*<p class="means">&quot;receipt&quot; and &quot;by&quot; take 1 to 128',
 '"detail":"\\\\"outcome\\\\" must be',
 '^(?!.*"resolved")\{"call_id":"rs-30",.*"state":"UNKNOWN"',
 "",
 '<h1 class="state s-other">Not resolvable</h1>.*the call&#39;s latest execution is SUCCESS|<h1 class="state s-other">Not resolvable</h1>.*latest execution is SUCCESS, not UNKNOWN']
--- no_error_log
[alert]
[emerg]



=== TEST 31: CSRF: a POST from another origin (form or JSON), one that says Sec-Fetch-Site: cross-site, or Origin null: 403 resolution-cross-site, nothing written; a GET with ?outcome= is a read; the location's own origin (default port or not) resolves
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1",
 "POST /calls/rs-31\noutcome=applied&by=evil",
 "POST /calls/rs-31\n{\"outcome\":\"applied\"}",
 "POST /calls/rs-31\noutcome=applied",
 "POST /calls/rs-31\n{\"outcome\":\"applied\"}",
 "POST /calls/rs-31\n{\"outcome\":\"applied\"}",
 "POST /calls/rs-31\n{\"outcome\":\"applied\"}",
 "GET /calls/rs-31?outcome=applied&by=evil",
 "POST /calls/rs-31\n{\"outcome\":\"not_applied\",\"by\":\"ops\"}",
 "GET /calls/rs-31"]
--- more_headers eval
["X-Call-Id: rs-31",
 "Content-Type: application/x-www-form-urlencoded\nOrigin: http://evil.example\nAccept: text/html",
 "Origin: http://localhost:1",
 "Content-Type: application/x-www-form-urlencoded\nSec-Fetch-Site: cross-site",
 "Origin: null",
 "Origin: https://localhost",
 "Origin: http://localhost\nOrigin: http://localhost",
 "",
 "Origin: http://LocalHost:80\nSec-Fetch-Site: same-origin",
 ""]
--- error_code eval
[504, 403, 403, 403, 403, 403, 403, 200, 200, 200]
--- response_headers_like eval
["", "Content-Type: application/problem\\+json", "Content-Type: application/problem\\+json", "", "", "", "", "", "", ""]
--- response_body_like eval
["",
 '^\{"type":"urn:ngx-idem:problem:resolution-cross-site","title":"Cross-site resolution","status":403,"detail":"its Origin is not this location\'s own \(scheme, host and port of the request\)"\}',
 '"type":"urn:ngx-idem:problem:resolution-cross-site"',
 '"detail":"the request says it comes from another site \(Sec-Fetch-Site: cross-site\)"',
 '"type":"urn:ngx-idem:problem:resolution-cross-site"',
 '"type":"urn:ngx-idem:problem:resolution-cross-site"',
 '"type":"urn:ngx-idem:problem:resolution-cross-site"',
 '^(?!.*"resolved")\{"call_id":"rs-31",.*"state":"UNKNOWN"',
 '"state":"FAILED",.*"resolved":\{"execution":1,"outcome":"not_applied","at_ms":\d+,"receipt":null,"by":"ops"\}',
 '"resolved":\{"execution":1,"outcome":"not_applied","at_ms":\d+,"receipt":null,"by":"ops"\}']
--- no_error_log
[alert]
[emerg]



=== TEST 32: the form only where it can be taken: not on a location without resolve=on, nor on a call that is not UNKNOWN; no link to a list where there is none
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /ok {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location /ro/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1", "GET /ok", "GET /ro/rs-32", "GET /calls/rs-32ok",
 "GET /calls/rs-32"]
--- more_headers eval
["X-Call-Id: rs-32", "X-Call-Id: rs-32ok", "Accept: text/html",
 "Accept: text/html", "Accept: text/html"]
--- error_code eval
[504, 200, 200, 200, 200]
--- response_body_like eval
["", "", '^(?!.*<form)(?!.*<button).*<h1 class="state s-UNKNOWN">UNKNOWN</h1>',
 '^(?!.*<form).*<h1 class="state s-SUCCESS">SUCCESS</h1>',
 '^(?!.*class="nav")(?=.*<h1 class="state s-UNKNOWN">UNKNOWN</h1>).*<form method="post" class="resolve">']
--- no_error_log
[alert]
[emerg]



=== TEST 33: the form's 303 stays on this host: posted to //evil.example/..%2Fcalls/<id> (nginx normalises it to this location), with absolute_redirect off, it points to the normalised path; the page then says a person decided, who and when
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /calls/ {
        absolute_redirect off;
        idem_status resolve=on;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /pay\nx=1",
 "POST //evil.example/..%2Fcalls/rs-33\noutcome=applied&by=ops%3Ajane",
 "GET /calls/rs-33"]
--- more_headers eval
["X-Call-Id: rs-33", "Content-Type: application/x-www-form-urlencoded",
 "Accept: text/html"]
--- error_code eval
[504, 303, 200]
--- response_headers eval
["", "Location: /calls/rs-33", ""]
--- response_body_like eval
["", "^Resolved: see the call's page.\n\$",
 '<h1 class="state s-SUCCESS">SUCCESS</h1>\n<p class="means">It took effect, in a person\'s word: the service never answered it \(its last attempt timed out waiting for an answer; the caller got 504\)\. <code>ops:jane</code> decided so at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC\.</p>']
--- no_error_log
[alert]
[emerg]
