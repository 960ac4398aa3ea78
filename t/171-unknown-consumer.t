# The example consumer of idem_unknown_stream (util/unknown-consumer.py,
# Debian's python3 and python3-redis) against the stream and records the
# gateway wrote in the test's redis-server: a consumer group, bounded
# rounds per entry then a person, a resend that succeeded, a record gone,
# a dedupe scope's record read by its key, a dead consumer's entries taken
# over, a second group with a receipt check, verdicts posted back (a
# scoped call's with its scope's digest).

use Cwd qw(abs_path);
use Digest::SHA ();

our $python;
our $consumer;

BEGIN {
    $python = '/usr/bin/python3';    # Debian's, with python3-redis
    my $root = abs_path(__FILE__ =~ m{^(.*)/t/} ? $1 : '.');
    $consumer = "$root/util/unknown-consumer.py";
    if (system("$python -c 'import redis' 2>/dev/null") != 0) {
        require Test::More;
        Test::More::plan(skip_all => 'python3-redis is not installed '
                                     . '(make deps)');
    }
}

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): the consumer resolves each UNKNOWN call once; a second
# run finds the fixed ids resolved.

no_long_string();
no_shuffle();
run_tests();

sub redis {
    my ($args) = @_;
    my $out = `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} $args`;
    chomp $out;
    return $out;
}

# one --once pass of the consumer on idem:comp; its output lines
sub consume {
    my ($args) = @_;
    my $out = `$python $consumer --redis 127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT} --stream idem:comp --once --rounds 3 $args 2>&1`;
    Test::More::is($?, 0, "consumer $args: exit 0") or Test::More::diag($out);
    return [split /\n/, $out];
}

# the line of one call id (and only one)
sub line_of {
    my ($lines, $id) = @_;
    my @l = grep { / \Q$id\E: / } @$lines;
    Test::More::is(scalar(@l), 1, "one line for $id")
        or Test::More::diag(join "\n", @$lines);
    return $l[0] // '';
}

# entries pending in a group
sub pending {
    my ($group) = @_;
    return (split /\n/, redis("xpending idem:comp $group"))[0];
}

__DATA__

=== TEST 1: four calls end UNKNOWN; one of them is sent again and succeeds
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream comp;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/9;
    }
    location /once {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/1;
    }
    location /scoped {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope $http_x_tenant;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/9;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /t/pay\na=1", "POST /once\na=1", "POST /once\na=1", "POST /t/gone\na=1",
 "POST /scoped\na=1"]
--- more_headers eval
["X-Call-Id: uc-1", "X-Call-Id: uc-2", "X-Call-Id: uc-2", "X-Call-Id: uc-3",
 "X-Call-Id: uc-4\nX-Tenant: tenant-secret-7"]
--- error_code eval
[502, 502, 200, 502, 502]
--- wait: 0.1
--- no_error_log
[alert]
[crit]



=== TEST 2: round 1: still UNKNOWN (the scoped one too), resolved, record gone
--- init
Test::More::is(main::redis("xlen idem:comp"), 4, "4 entries");
main::redis("del 'idem:c:{uc-3}'");
my $l = main::consume("--group comp --consumer a --escalate-to idem:people");
Test::More::is(scalar(@$l), 4, "one line per entry");
Test::More::like(main::line_of($l, 'uc-1'),
    qr{^\d+-\d+ uc-1: round 1/3: still UNKNOWN \(final status 502\): would ask the service for the receipt of POST /t/pay, trace [0-9a-f]{32}, node \S+, record idem:c:\{uc-1\}; again in 60000 ms$},
    'uc-1: round 1, what it would ask');
Test::More::like(main::line_of($l, 'uc-2'),
    qr{ uc-2: round 1/3: resolved: an execution of the same id that started later succeeded \(200\): nothing to undo$},
    'uc-2: resent, succeeded: resolved');
Test::More::like(main::line_of($l, 'uc-3'),
    qr{ uc-3: ESCALATE to a person: its record is gone \(idem_record_ttl passed\) \(POST /t/gone, },
    'uc-3: record gone: a person');
Test::More::like(main::line_of($l, 'uc-4'),
    qr{ uc-4: round 1/3: still UNKNOWN \(final status 502\): .* record idem:s:\{[0-9a-f]{64}:uc-4\};},
    'uc-4: the scoped record, read by its key');
Test::More::unlike(join("\n", @$l), qr/tenant-secret/, 'no scope value');
Test::More::is(main::pending('comp'), 2, '2 left pending');
--- config
    location /x {
        return 204;
    }
--- request
GET /x
--- error_code: 204
--- no_error_log
[error]



=== TEST 3: not due again before --retry-after; then another consumer takes them over (round 2)
--- init
my $l = main::consume("--group comp --consumer b");
Test::More::is(scalar(@$l), 0, "nothing due within 60 s: nothing done");
$l = main::consume("--group comp --consumer b --retry-after 0");
Test::More::like(main::line_of($l, 'uc-1'), qr{ uc-1: round 2/3: still UNKNOWN },
                 'uc-1: round 2');
Test::More::like(main::line_of($l, 'uc-4'), qr{ uc-4: round 2/3: still UNKNOWN },
                 'uc-4: round 2');
Test::More::is(scalar(@$l), 2, "only those two");
my @p = split /\n/, main::redis("xpending idem:comp comp - + 10");
my @who = map { "$p[4 * $_ + 1]:$p[4 * $_ + 3]" } 0 .. $#p / 4;
Test::More::is("@who", "b:2 b:2", 'both now with consumer b, delivered twice');
--- config
    location /x {
        return 204;
    }
--- request
GET /x
--- error_code: 204
--- no_error_log
[error]



=== TEST 4: round 3 of 3: escalated to a person, acknowledged; nothing after that
--- init
my $l = main::consume("--group comp --consumer b --retry-after 0 --escalate-to idem:people");
Test::More::like(main::line_of($l, 'uc-1'),
    qr{ uc-1: ESCALATE to a person: still UNKNOWN \(final status 502\) after 3 rounds \(POST /t/pay, },
    'uc-1: a person after 3 rounds');
Test::More::like(main::line_of($l, 'uc-4'),
    qr{ uc-4: ESCALATE to a person: still UNKNOWN \(final status 502\) after 3 rounds },
    'uc-4: a person after 3 rounds');
Test::More::is(main::pending('comp'), 0, 'nothing pending');
Test::More::is(main::redis("xlen idem:people"), 3, '3 escalated entries');
Test::More::like(main::redis("xrange idem:people - + count 1"),
                 qr/\ncall_id\nuc-3\n.*\nreason\nits record is gone/s,
                 "an escalated entry: the call's fields and the reason");
$l = main::consume("--group comp --consumer b --retry-after 0");
Test::More::is(scalar(@$l), 0, "nothing left");
--- config
    location /x {
        return 204;
    }
--- request
GET /x
--- error_code: 204
--- no_error_log
[error]



=== TEST 5: a second group reads the same entries; a receipt check decides
--- init
my $check = q{'case $IDEM_CALL_ID in uc-1) exit 0;; uc-4) exit 1;; *) exit 75;; esac'};
my $l = main::consume("--group audit --check $check");
Test::More::is(scalar(@$l), 4, "all 4 entries again");
Test::More::like(main::line_of($l, 'uc-1'),
    qr{ uc-1: round 1/3: took effect: the service has its receipt; would confirm it to the caller$},
    'uc-1: took effect');
Test::More::like(main::line_of($l, 'uc-4'),
    qr{ uc-4: round 1/3: did not take effect: nothing to undo; the caller may send it again with the same id$},
    'uc-4: did not take effect');
Test::More::like(main::line_of($l, 'uc-2'), qr{ uc-2: round 1/3: resolved: },
                 'uc-2: resolved before any check');
Test::More::is(main::pending('audit'), 0, 'nothing pending in audit');
--- config
    location /x {
        return 204;
    }
--- request
GET /x
--- error_code: 204
--- no_error_log
[error]



=== TEST 6: an exit the check does not know: still unknown, a round used
--- init
main::redis("del idem:comp");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream comp;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/9;
    }
--- request
POST /t
a=1
--- more_headers
X-Call-Id: uc-5
--- error_code: 502
--- wait: 0.1
--- no_error_log
[alert]
[crit]



=== TEST 7: ... round 1, then a person after the last round
--- init
my $l = main::consume(q{--group late --retry-after 0 --rounds 2 --check 'exit 75'});
Test::More::like(main::line_of($l, 'uc-5'),
    qr{ uc-5: round 1/2: still UNKNOWN \(final status 502\), the service does not know yet: would ask },
    'uc-5: round 1');
$l = main::consume(q{--group late --retry-after 0 --rounds 2 --check 'exit 75'});
Test::More::like(main::line_of($l, 'uc-5'),
    qr{ uc-5: ESCALATE to a person: still UNKNOWN \(final status 502\), the service does not know yet after 2 rounds },
    'uc-5: a person');
Test::More::is(main::pending('late'), 0, 'nothing pending');
--- config
    location /x {
        return 204;
    }
--- request
GET /x
--- error_code: 204
--- no_error_log
[error]



=== TEST 8: --resolve-url: two more calls end UNKNOWN, on a gateway whose status location takes resolutions
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream comp;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/9;
    }
    location /calls/ {
        idem_status resolve=on;
    }
--- request eval
["POST /t\na=1", "POST /t\na=2"]
--- more_headers eval
["X-Call-Id: uc-6", "X-Call-Id: uc-7"]
--- error_code eval
[502, 502]
--- wait: 0.1
--- no_error_log
[alert]
[crit]



=== TEST 9: ... the check's verdicts go back into the records: applied with the receipt it printed, not applied
--- init
my $check = q{'case $IDEM_CALL_ID in uc-6) echo pay_c6; exit 0;; uc-7) exit 1;; *) exit 75;; esac'};
my $l = main::consume("--group resolver --check $check --resolve-url http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/calls/");
Test::More::like(main::line_of($l, 'uc-6'),
    qr{ uc-6: round 1/3: took effect \(receipt pay_c6\): resolved in the record \(200\)$},
    'uc-6: applied, posted');
Test::More::like(main::line_of($l, 'uc-7'),
    qr{ uc-7: round 1/3: did not take effect: resolved in the record \(200\)$},
    'uc-7: not applied, posted');
$l = main::consume("--group again --check 'exit 75' --resolve-url http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/calls/");
Test::More::like(main::line_of($l, 'uc-6'),
    qr{ uc-6: round 1/3: resolved: the service's word is in the record already: applied$},
    'another group: uc-6 is resolved in its record');
--- request eval
["GET /calls/uc-6", "GET /calls/uc-7"]
--- response_body_like eval
['"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"applied","at_ms":\d+,"receipt":"pay_c6","by":"unknown-consumer:[^"]+"\}',
 '"state":"FAILED",.*"resolved":\{"execution":1,"outcome":"not_applied",']
--- no_error_log
[alert]
[crit]



=== TEST 10: --resolve-url: 409 resolution-too-early (a lapsed claim whose owner may still answer) is not settled: the entry stays pending; once the owner's final write is in, it is resolved
--- init
# a dedupe claim whose lease lapsed, its owner still running with no
# bound (no deadline), and its entry read before its final write (as on a
# cluster, where the two are on two masters)
my ($s, $us) = split /\n/, main::redis("time");
my $now = $s * 1000 + int($us / 1000);
main::redis("hset 'idem:c:{uc-20}' o tok9 d x v 1 l:tok9 " . ($now - 1000)
            . " b:tok9 - e:tok9 'P " . ($now - 5000)
            . " client gw-busy POST 4bf92f3577b34da6a3ce929d0e0e4736 /t'");
main::redis("xadd idem:comp '*' call_id uc-20 trace_id 4bf92f3577b34da6a3ce929d0e0e4736 key 'idem:c:{uc-20}' token tok9 method POST uri /t node gw-busy attempts 1 last_outcome timeout last_sent 1 final_status 504 created_ms "
            . ($now - 5000) . " ended_ms $now");
my $check = q{'case $IDEM_CALL_ID in uc-20) exit 1;; *) exit 75;; esac'};
my $url = "http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/calls/";
my $l = main::consume("--group late --check $check --resolve-url $url");
my @l = grep { / uc-20: / } @$l;
Test::More::like($l[0] // '',
    qr{ uc-20: round 1/3: did not take effect: refused \(409: the call's latest execution has no final state and its owner may still answer: .*\), and the record is not settled$},
    'uc-20: too early, said so');
Test::More::like($l[1] // '',
    qr{ uc-20: round 1/3: still UNKNOWN \(the record has no final write for this execution yet\), the gateway refused the verdict: would ask },
    '... not settled');
my @p = split /\n/, main::redis("xpending idem:comp late - + 100");
my %pending = map { $p[4 * $_] => 1 } 0 .. $#p / 4;
my ($entry) = ($l[0] // '') =~ /^(\S+)/;
Test::More::ok($entry && $pending{$entry}, 'its entry is still pending');
# the owner's final write lands: UNKNOWN, its answer lost
main::redis("hset 'idem:c:{uc-20}' f:tok9 'UNKNOWN 504 $now "
            . ($now - 5000) . " client gw-busy POST 4bf92f3577b34da6a3ce929d0e0e4736 /t' k:tok9 U");
$l = main::consume("--group late --check $check --resolve-url $url --retry-after 0");
@l = grep { / uc-20: / } @$l;
Test::More::like($l[0] // '',
    qr{ uc-20: round 2/3: did not take effect: resolved in the record \(200\)$},
    'uc-20: round 2, resolved');
@p = split /\n/, main::redis("xpending idem:comp late - + 100");
%pending = map { $p[4 * $_] => 1 } 0 .. $#p / 4;
Test::More::ok(!$pending{$entry}, 'its entry acknowledged');
--- request
GET /calls/uc-20
--- response_body_like chomp
"state":"FAILED",.*"resolved":\{"execution":1,"outcome":"not_applied",
--- no_error_log
[alert]
[crit]



=== TEST 11: --resolve-url and a dedupe scope: a scoped call ends UNKNOWN, on a gateway whose operators' status location takes resolutions by the scope's digest
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream comp;
--- config
    location /scoped {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope $http_x_tenant;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/9;
    }
    location /calls/ {
        idem_dedupe_scope $http_x_tenant;
        idem_status resolve=on;
    }
    location /ops/calls/ {
        idem_dedupe_scope $http_x_tenant;
        idem_status resolve=on scope_digest=on;
    }
--- request eval
["POST /scoped\na=1", "POST /scoped\na=1"]
--- more_headers eval
["X-Call-Id: uc-8\nX-Tenant: tenant-secret-8",
 "X-Call-Id: uc-9\nX-Tenant: tenant-secret-8"]
--- error_code eval
[502, 502]
--- wait: 0.1
--- no_error_log
[alert]
[crit]



=== TEST 12: ... the verdict is posted with the scope's digest and lands in the scoped record; a client's status location refuses the digest (the entry stays pending)
--- init
my $check = q{'case $IDEM_CALL_ID in uc-8|uc-9) echo pay_s8; exit 0;; *) exit 75;; esac'};
my $port = $ENV{TEST_NGINX_SERVER_PORT};
my $l = main::consume("--group scoped --check $check --resolve-url http://127.0.0.1:$port/calls/");
my $u8 = join("\n", grep { / uc-8: / } @$l);
Test::More::like($u8,
    qr{ uc-8: round 1/3: took effect \(receipt pay_s8\): the gateway answered 400 \(invalid-scope-digest\)\n.* uc-8: round 1/3: still UNKNOWN .*, the gateway was not told: }s,
    'uc-8: a client location refuses the digest: not resolved, pending');
$l = main::consume("--group scoped-ops --check $check --resolve-url http://127.0.0.1:$port/ops/calls/");
Test::More::like(main::line_of($l, 'uc-8'),
    qr{ uc-8: round 1/3: took effect \(receipt pay_s8\): resolved in the record \(200\)$},
    'uc-8: resolved by its scope\'s digest');
Test::More::unlike(join("\n", @$l), qr/tenant-secret/, 'no scope value');
--- request eval
my $d = Digest::SHA::sha256_hex("tenant-secret-8");
["GET /ops/calls/uc-8?scope_digest=$d", "GET /calls/uc-8"]
--- more_headers eval
["", "X-Tenant: tenant-secret-8"]
--- error_code eval
[200, 200]
--- response_body_like eval
['"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"applied","at_ms":\d+,"receipt":"pay_s8","by":"unknown-consumer:[^"]+"\}',
 '"call_id":"uc-8",.*"state":"SUCCESS"']
--- no_error_log
[alert]
[crit]



=== TEST 13: two more calls end UNKNOWN; the gateway the verdicts go to refuses one with 409 while its record is still UNKNOWN
--- init
main::redis("del idem:comp");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream comp;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/9;
    }
    location /calls/ {
        idem_status resolve=on;
    }
    location = /rs/uc-10 {
        return 409 '{"type":"urn:ngx-idem:problem:resolution-conflict","status":409,"detail":"the call\'s latest execution is FAILED, not UNKNOWN"}';
    }
    location /rs/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/calls/;
    }
--- request eval
["POST /t\na=1", "POST /t\na=2"]
--- more_headers eval
["X-Call-Id: uc-10", "X-Call-Id: uc-11"]
--- error_code eval
[502, 502]
--- wait: 0.1
--- no_error_log
[alert]
[crit]



=== TEST 14: ... a 409 is done with only when the record is settled: uc-11, resolved first by someone else (its check), is; uc-10, still UNKNOWN, stays pending, then goes to a person
--- init
my $url = "http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}";
my $check = qq{'case \$IDEM_CALL_ID in uc-11) curl -s -o /dev/null -d "{\\"outcome\\":\\"applied\\"}" $url/calls/uc-11;; esac; exit 0'};
my $l = main::consume("--group refused --retry-after 0 --rounds 2 --check $check --resolve-url $url/rs/");
Test::More::like(main::line_of($l, 'uc-11'),
    qr{ uc-11: round 1/2: took effect: refused \(409: [^)]*\); resolved already: the service's word is in the record already: applied$},
    'uc-11: the 409 of a record resolved first: done');
my @l8 = grep { / uc-10: / } @$l;
Test::More::like($l8[0] // '',
    qr{ uc-10: round 1/2: took effect: refused \(409: the call's latest execution is FAILED, not UNKNOWN\), and the record is not settled$},
    'uc-10: refused, its record not settled');
Test::More::like($l8[1] // '',
    qr{ uc-10: round 1/2: still UNKNOWN \(final status 502\), the gateway refused the verdict: would ask },
    '... pending, a round used');
Test::More::is(main::pending('refused'), 1, 'uc-10 left pending');
$l = main::consume("--group refused --retry-after 0 --rounds 2 --check 'exit 0' --resolve-url $url/rs/");
Test::More::like((grep { / uc-10: / } @$l)[-1] // '',
    qr{ uc-10: ESCALATE to a person: still UNKNOWN \(final status 502\), the gateway refused the verdict after 2 rounds },
    'uc-10: a person after the last round');
Test::More::is(main::pending('refused'), 0, 'nothing pending');
--- request eval
["GET /calls/uc-10", "GET /calls/uc-11"]
--- response_body_like eval
['"state":"UNKNOWN",',
 '"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"applied",']
--- no_error_log
[alert]
[crit]



=== TEST 15: --resolve-url at the operators' location of a server with a dedupe scope: three unscoped calls (idem_dedupe_scope off) and a scoped one end UNKNOWN
--- init
main::redis("del idem:comp");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream comp;
--- config
    idem_dedupe_scope $http_x_tenant;
    location /t {
        idem on;
        idem_record on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/9;
    }
    location /scoped {
        idem on;
        idem_dedupe on;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/9;
    }
    location /_idem/calls/ {
        idem_status resolve=on scope_digest=on;
    }
    location /v1/calls/ {
        idem_status resolve=on;
    }
    location /plain/calls/ {
        idem_dedupe_scope off;
        idem_status;
    }
    location /_idem/ip/calls/ {
        idem_dedupe_scope $remote_addr;
        idem_status resolve=on scope_digest=on;
    }
--- request eval
["POST /t\na=1", "POST /t\na=2", "POST /scoped\na=3", "POST /t\na=4"]
--- more_headers eval
["X-Call-Id: uc-12", "X-Call-Id: uc-13",
 "X-Call-Id: uc-14\nX-Tenant: tenant-secret-14", "X-Call-Id: uc-15"]
--- error_code eval
[502, 502, 502, 502]
--- wait: 0.1
--- no_error_log
[alert]
[crit]



=== TEST 16: ... each verdict is posted as the list links the call: the unscoped ones by scope_digest=none (bare, the location would read them under the consumer's empty scope: 400 empty-dedupe-scope; or under its address, where that is the scope: a 404 that would pass for a record gone), the scoped one by its digest; a client's location refuses none and the digest, and the entries stay pending
--- init
Test::More::like(main::redis("xrange idem:comp - + count 1"),
                 qr/\nkey\nidem:c:\{uc-12\}\n/, 'uc-12 is recorded without a scope');
my $check = q{'case $IDEM_CALL_ID in uc-12) echo pay_u12; exit 0;; uc-13) exit 1;; uc-14) echo pay_s14; exit 0;; *) exit 75;; esac'};
my $url = "http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}";
my $l = main::consume("--group client --check $check --resolve-url $url/v1/calls/");
my $u12 = join("\n", grep { / uc-12: / } @$l);
Test::More::like($u12,
    qr{ uc-12: round 1/3: took effect \(receipt pay_u12\): the gateway answered 400 \(empty-dedupe-scope\)\n.* uc-12: round 1/3: still UNKNOWN .*, the gateway was not told: }s,
    'uc-12: a client location refuses none, then has no scope: pending');
Test::More::like(join("\n", grep { / uc-14: / } @$l),
    qr{ uc-14: round 1/3: took effect \(receipt pay_s14\): the gateway answered 400 \(invalid-scope-digest\)\n}s,
    'uc-14: a client location refuses the digest: pending');
Test::More::is(main::pending('client'), 4, 'all 4 pending');
$l = main::consume("--group ops --check $check --resolve-url $url/_idem/calls/");
Test::More::like(main::line_of($l, 'uc-12'),
    qr{ uc-12: round 1/3: took effect \(receipt pay_u12\): resolved in the record \(200\)$},
    'uc-12: resolved by scope_digest=none');
Test::More::like(main::line_of($l, 'uc-13'),
    qr{ uc-13: round 1/3: did not take effect: resolved in the record \(200\)$},
    'uc-13: resolved by scope_digest=none');
Test::More::like(main::line_of($l, 'uc-14'),
    qr{ uc-14: round 1/3: took effect \(receipt pay_s14\): resolved in the record \(200\)$},
    'uc-14: resolved by its scope\'s digest');
Test::More::is(main::pending('ops'), 1, 'uc-15 left pending');
Test::More::unlike(join("\n", @$l), qr/tenant-secret/, 'no scope value');
$l = main::consume(q{--group ip --check 'case $IDEM_CALL_ID in uc-15) exit 0;; *) exit 75;; esac'} . " --resolve-url $url/_idem/ip/calls/");
Test::More::like(main::line_of($l, 'uc-15'),
    qr{ uc-15: round 1/3: took effect: resolved in the record \(200\)$},
    'uc-15: resolved by scope_digest=none where the scope is the address');
Test::More::is(main::pending('ip'), 0, 'nothing pending');
--- request eval
my $d = Digest::SHA::sha256_hex("tenant-secret-14");
["GET /_idem/calls/uc-12?scope_digest=none", "GET /plain/calls/uc-13",
 "GET /_idem/calls/uc-14?scope_digest=$d", "GET /plain/calls/uc-15",
 "GET /_idem/calls/"]
--- more_headers eval
["", "", "", "", "Accept: application/json"]
--- error_code eval
[200, 200, 200, 200, 200]
--- response_body_like eval
['^\{"call_id":"uc-12",.*"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"applied","at_ms":\d+,"receipt":"pay_u12","by":"unknown-consumer:[^"]+"\}',
 '^\{"call_id":"uc-13",.*"state":"FAILED",.*"resolved":\{"execution":1,"outcome":"not_applied",',
 '^\{"call_id":"uc-14",.*"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"applied","at_ms":\d+,"receipt":"pay_s14",',
 '^\{"call_id":"uc-15",.*"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"applied",',
 '^\{"calls":\[\],"next":null\}$']
--- no_error_log
[alert]
[crit]
