# idem_metrics: the module's counters, shared by all workers, in
# Prometheus' text format.

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): the blocks read the counters exactly; a second run's
# counters include the first run's calls.

use lib 't/lib';
use IdemWait ();

my @bounds = qw(0.00025 0.0005 0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25
                0.5 1 2.5 5 10);

# the SUCCESS histogram as a scrape shows it: its count, its sum in µs and
# its cumulative buckets by bound
sub success {
    my $m = IdemWait::get($ENV{TEST_NGINX_SERVER_PORT}, '/metrics');
    my %le = $m =~ /^idem_call_duration_seconds_bucket\{state="SUCCESS",le="([^"]+)"\} (\d+)$/mg;
    my ($s, $f) = $m =~ /^idem_call_duration_seconds_sum\{state="SUCCESS"\} (\d+)\.(\d{6})$/m;
    my ($n) = $m =~ /^idem_call_duration_seconds_count\{state="SUCCESS"\} (\d+)$/m;
    return { n => $n // -1, us => defined $s ? $s * 1000000 + $f : -1,
             le => \%le };
}

# the bucket a duration of $us lands in: its bound, as shown
sub bucket_of {
    my ($us) = @_;
    for my $b (@bounds) {
        return $b if $us <= $b * 1000000;
    }
    return '+Inf';
}

# the SUCCESS calls counted since $before: how many landed in each bucket
sub landed {
    my ($before, $after) = @_;
    my (%n, $below);
    $below = 0;
    for my $b (@bounds, '+Inf') {
        my $c = $after->{le}{$b} - $before->{le}{$b};
        $n{$b} = $c - $below;
        $below = $c;
    }
    return \%n;
}

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: every counter starts at zero
--- config
    location /metrics {
        idem_metrics;
    }
--- request
GET /metrics
--- response_headers
Content-Type: text/plain; version=0.0.4
--- response_body_like chomp
\A# HELP idem_calls_total Calls whose ids were settled on routes with idem on\.
# TYPE idem_calls_total counter
idem_calls_total 0
.*idem_rejected_total\{reason="invalid_call_id"\} 0
idem_rejected_total\{reason="missing_call_id"\} 0
.*idem_status_answers_total\{state="unknown"\} 0
.*idem_dedupe_total\{result="claimed"\} 0
.*idem_dedupe_total\{result="unavailable"\} 0
.*idem_dedupe_total\{result="not_durable"\} 0
.*idem_resolutions_refused_total\{reason="unavailable"\} 0
idem_resolutions_refused_total\{reason="early"\} 0
idem_resolutions_refused_total\{reason="final_write"\} 0
# HELP idem_resolutions_forced_total Resolutions taken with force: an operator's word that the owner's gateway is gone \(counted in idem_resolutions_total too\)\.
# TYPE idem_resolutions_forced_total counter
idem_resolutions_forced_total\{outcome="applied"\} 0
idem_resolutions_forced_total\{outcome="not_applied"\} 0
# HELP idem_resends_refused_total Resends of known call ids refused by idem_resend_limit \(429\)\.
# TYPE idem_resends_refused_total counter
idem_resends_refused_total 0
# HELP idem_otel_spans_total Spans exported to idem_otel_endpoint, or dropped \(the worker's queue full, the collector slow, away or refusing\)\.
# TYPE idem_otel_spans_total counter
idem_otel_spans_total\{result="sent"\} 0
idem_otel_spans_total\{result="dropped"\} 0
# HELP idem_call_duration_seconds .*
# TYPE idem_call_duration_seconds histogram
idem_call_duration_seconds_bucket\{state="SUCCESS",le="0\.00025"\} 0
.*idem_call_duration_seconds_bucket\{state="UNKNOWN",le="\+Inf"\} 0
idem_call_duration_seconds_sum\{state="UNKNOWN"\} 0\.000000
idem_call_duration_seconds_count\{state="UNKNOWN"\} 0
# HELP idem_dedupe_claim_duration_seconds .*
# TYPE idem_dedupe_claim_duration_seconds histogram
.*idem_dedupe_claim_duration_seconds_count\{durable="true"\} 0
# HELP idem_dedupe_wait_duration_seconds .*
# TYPE idem_dedupe_wait_duration_seconds histogram
.*idem_dedupe_wait_duration_seconds_count\{result="client_gone"\} 0
# HELP idem_dedupe_waiters .*
# TYPE idem_dedupe_waiters gauge
idem_dedupe_waiters 0
\z
--- no_error_log
[error]



=== TEST 2: calls, generated ids, rejections, attempts, retries, budgets
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/2;
    }
    location /r {
        idem on;
        idem_call_id_missing reject;
        return 200;
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["GET /t", "GET /t", "GET /r", "GET /t", "GET /t", "GET /metrics"]
--- more_headers eval
["X-Call-Id: m-1", "", "", "X-Call-Id: a b", "X-Deadline-Ms: 0", ""]
--- error_code eval
[200, 200, 400, 400, 504, 200]
--- response_body_like eval
["n=3", "n=3", "missing-call-id", "invalid-call-id", "deadline-exceeded",
 '(?s)idem_calls_total 3\n.*idem_call_ids_generated_total 2\n.*reason="invalid_call_id"\} 1\nidem_rejected_total\{reason="missing_call_id"\} 1\nidem_rejected_total\{reason="invalid_trace_id"\} 0\nidem_rejected_total\{reason="invalid_deadline"\} 0\n.*idem_deadline_exceeded_total 1\n.*idem_attempts_total 6\n.*idem_retries_total 4\n']
--- no_error_log
[error]



=== TEST 3: record writes queued and dropped, status answers
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["GET /t", "GET /calls/m-rec-1", "GET /calls/m-never", "GET /metrics"]
--- more_headers eval
["X-Call-Id: m-rec-1", "", "", ""]
--- error_code eval
[200, 200, 404, 200]
--- response_body_like eval
["n=1", '"state":"SUCCESS"', "NOT_FOUND",
 '(?s)idem_record_writes_total\{result="queued"\} [1-9]\d*\nidem_record_writes_total\{result="dropped"\} 0\n.*state="found"\} 1\nidem_status_answers_total\{state="not_found"\} 1\n']
--- no_error_log
[error]



=== TEST 4: GET and HEAD only
--- config
    location /metrics {
        idem_metrics;
    }
--- request
POST /metrics
x
--- error_code: 405



=== TEST 5: the module's own endpoints are not calls: with idem on at the server's level, a scrape, a status read and a resolution get no call id and count nothing
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    idem on;
    location /calls/ {
        idem_status;
    }
    location /resolve/ {
        idem_status resolve=on;
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["GET /metrics", "GET /calls/m-endpoint-1",
 "POST /resolve/m-endpoint-1\n{\"outcome\":\"applied\"}", "GET /metrics"]
--- error_code eval
[200, 404, 404, 200]
--- response_headers eval
["!X-Call-Id\n!X-Trace-Id", "!X-Call-Id\n!X-Trace-Id",
 "!X-Call-Id\n!X-Trace-Id", "!X-Call-Id\n!X-Trace-Id"]
--- response_body_like eval
["idem_calls_total 0\n", "NOT_FOUND", "NOT_FOUND",
 '(?s)idem_calls_total 0\n.*idem_call_ids_generated_total 0\n.*state="not_found"\} 2\n.*reason="not_found"\} 1\n']
--- no_error_log
[error]



=== TEST 6: a call's duration, by its final state: a call the backend holds 300 ms is in the bucket its duration falls in (0.5 s, or more on a slow machine), in none of 0.25 s or less
--- config
    location /t {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/300/1;
    }
    location /f {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/500/1;
    }
    location /metrics {
        idem_metrics;
    }
--- init
my $port = $ENV{TEST_NGINX_SERVER_PORT};
my $before = main::success();
Test::More::like(`curl -s --max-time 10 -H 'X-Call-Id: m-hist-0' http://127.0.0.1:$port/t`,
                 qr/^n=1/, 'the held call: 200');
my $after;
Test::More::ok(IdemWait::wait_for('the held call counted',
                                  sub { ($after = main::success())->{n} == 1 }),
               'the held call counted');
my $us = $after->{us} - $before->{us};
Test::More::cmp_ok($us, '>=', 300000, "held 300 ms: $us us");
my $b = main::bucket_of($us);
Test::More::is(main::landed($before, $after)->{$b}, 1,
               "it lands in the bucket of $b s, the one its $us us fall in");
--- request eval
["GET /t", "GET /f", "GET /metrics"]
--- more_headers eval
["X-Call-Id: m-hist-1", "X-Call-Id: m-hist-2", ""]
--- error_code eval
[200, 500, 200]
--- response_body_like eval
["n=1", "", '(?s)state="SUCCESS",le="0\.25"\} 0\n.*state="SUCCESS",le="\+Inf"\} 2\nidem_call_duration_seconds_sum\{state="SUCCESS"\} (?:0\.[6-9]|[1-9]\d*\.)\d{5,6}\nidem_call_duration_seconds_count\{state="SUCCESS"\} 2\n.*idem_call_duration_seconds_count\{state="FAILED"\} 1\nidem_call_duration_seconds_bucket\{state="UNKNOWN",le="0\.00025"\} 0\n']
--- no_error_log
[error]



=== TEST 7: refusals before a call exists (ids, budget, scope, a resend over the limit) count in idem_rejected_total and idem_resends_refused_total, in no execution's state
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_resend_limit_zone $binary_remote_addr zone=ip:1m rate=1r/m;
--- config
    location /r {
        idem on;
        idem_call_id_missing reject;
        return 200 "ok\n";
    }
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope $http_x_tenant;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /rec {
        idem on;
        idem_record on;
        idem_resend_limit zone=ip;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /r", "GET /r", "GET /r", "GET /r", "POST /d\nx=1", "GET /rec",
 "GET /rec", "GET /rec", "GET /metrics"]
--- more_headers eval
["", "X-Call-Id: a b", "X-Call-Id: m-ref-1\nX-Deadline-Ms: soon",
 "X-Call-Id: m-ref-2\nX-Trace-Id: \x01", "X-Call-Id: m-ref-3",
 "X-Call-Id: m-ref-4", "X-Call-Id: m-ref-4", "X-Call-Id: m-ref-4", ""]
--- error_code eval
[400, 400, 400, 400, 400, 200, 200, 429, 200]
--- response_body_like eval
["missing-call-id", "invalid-call-id", "invalid-deadline", "invalid-trace-id",
 "empty-dedupe-scope", "n=1", "n=1", "too-many-resends",
 '(?s)reason="invalid_call_id"\} 1\nidem_rejected_total\{reason="missing_call_id"\} 1\nidem_rejected_total\{reason="invalid_trace_id"\} 1\nidem_rejected_total\{reason="invalid_deadline"\} 1\nidem_rejected_total\{reason="empty_scope"\} 1\n.*idem_resends_refused_total 1\n.*idem_call_duration_seconds_count\{state="SUCCESS"\} 2\n.*idem_call_duration_seconds_count\{state="FAILED"\} 0\n.*idem_call_duration_seconds_count\{state="UNKNOWN"\} 0\n']
--- no_error_log
[error]



=== TEST 8: durations in µs of a monotonic clock: a call the gateway answers itself lands under 1 ms, in the bucket its duration falls in, and durations are not whole milliseconds
--- config
    location /r {
        idem on;
        return 200 "ok\n";
    }
    location /metrics {
        idem_metrics;
    }
--- init
my $port = $ENV{TEST_NGINX_SERVER_PORT};
my ($sub_ms, $fraction, $wrong) = (0, 0, '');
my $before = main::success();
# a loaded machine may hold one call past 1 ms: up to 20 calls, each
# checked, until one was under 1 ms and one not a whole millisecond
for my $i (1 .. 20) {
    Test::More::like(`curl -s --max-time 10 -H 'X-Call-Id: m-fast-$i' http://127.0.0.1:$port/r`,
                     qr/^ok/, "fast call $i: 200");
    my $after;
    IdemWait::wait_for("fast call $i counted",
                       sub { ($after = main::success())->{n} == $i })
        or last;
    my $us = $after->{us} - $before->{us};
    my $b = main::bucket_of($us);
    $wrong .= "call $i: $us us, not in le=$b; "
        unless main::landed($before, $after)->{$b} == 1;
    $sub_ms = 1 if $us < 1000;
    $fraction = 1 if $us % 1000;
    $before = $after;
    last if $sub_ms && $fraction;
}
Test::More::ok($sub_ms, 'a call under 1 ms, in a bucket under 1 ms');
Test::More::ok($fraction, 'a duration of µs, not whole milliseconds');
Test::More::is($wrong, '', 'each call in the bucket its duration falls in');
--- request
GET /metrics
--- response_body_like
(?m)^idem_call_duration_seconds_count\{state="SUCCESS"\} [1-9]\d*$
--- no_error_log
[error]



=== TEST 9: idem_unknown_unresolved: an UNKNOWN call (a timeout) counts once a scrape's read has found it, as long as it waits; resolved, it leaves the count
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream people;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 100ms;
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
    location /metrics {
        idem_metrics unknown_interval=100ms;
    }
--- init
use lib 't/lib';
use IdemWait ();
my $port = $ENV{TEST_NGINX_SERVER_PORT};
my $gauge = sub {
    my $m = IdemWait::get($port, '/metrics');
    return $m =~ /^idem_unknown_unresolved\{stream="people"\} (\d+)$/m
           ? $1 : -1;
};
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
Test::More::like(`curl -s -i --max-time 10 -H 'X-Call-Id: m-unk-1' --data x=1 http://127.0.0.1:$port/pay`,
                 qr{^HTTP/1.1 504 }, 'the call timed out: UNKNOWN');
Test::More::like(`curl -s -i --max-time 10 -H 'X-Call-Id: m-unk-2' http://127.0.0.1:$port/ok`,
                 qr{^HTTP/1.1 200 }, 'a call that succeeded');
Test::More::ok(IdemWait::wait_for('the gauge at 1', sub { $gauge->() == 1 }),
               'the UNKNOWN call counts');
Test::More::like(`curl -s -i --max-time 10 -H 'Content-Type: application/json' --data '{"outcome":"applied","by":"ops"}' http://127.0.0.1:$port/calls/m-unk-1`,
                 qr{^HTTP/1.1 200 }, 'resolved');
Test::More::ok(IdemWait::wait_for('the gauge at 0', sub { $gauge->() == 0 }),
               'resolved, it no longer counts');
--- request
GET /metrics
--- response_body_like
(?s)# TYPE idem_unknown_unresolved gauge
idem_unknown_unresolved\{stream="people"\} 0
# HELP idem_unknown_unresolved_age_seconds .*
# TYPE idem_unknown_unresolved_age_seconds gauge
idem_unknown_unresolved_age_seconds\{stream="people"\} \d+\.\d{3}
# HELP idem_unknown_unresolved_truncated .*
# TYPE idem_unknown_unresolved_truncated gauge
idem_unknown_unresolved_truncated\{stream="people"\} 0
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 10: idem_unknown_unresolved: absent before a first read has ended; a read stops at unknown_max entries (the newest) and says so
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream people;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 100ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /metrics {
        idem_metrics unknown_interval=100ms unknown_max=1;
    }
--- init
use lib 't/lib';
use IdemWait ();
my $port = $ENV{TEST_NGINX_SERVER_PORT};
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
for my $id ('m-unk-3', 'm-unk-4') {
    Test::More::like(`curl -s -i --max-time 10 -H 'X-Call-Id: $id' --data x=1 http://127.0.0.1:$port/pay`,
                     qr{^HTTP/1.1 504 }, "$id timed out: UNKNOWN");
}
Test::More::unlike(IdemWait::get($port, '/metrics'), qr/idem_unknown_unresolved/,
                   'the first scrape: no read has ended, no gauge');
Test::More::ok(IdemWait::wait_for('the truncated read',
    sub { IdemWait::get($port, '/metrics')
          =~ /^idem_unknown_unresolved_truncated\{stream="people"\} 1$/m }),
    'a read of 1 entry');
--- request
GET /metrics
--- response_body_like
(?ms)^idem_unknown_unresolved\{stream="people"\} 1\n.*^idem_unknown_unresolved_truncated\{stream="people"\} 1$
--- no_error_log
[alert]
[crit]
[emerg]
