# idem_unknown_stream: executions that end UNKNOWN are appended to a Redis
# stream, in the same batch as their record's final write, for a
# compensation job to follow up.  Nothing else is appended.  Redis
# stopped for real (t/lib/RedisFault.pm): the entry is lost with the final
# write, and counted.

use lib 't/lib';
use IdemWait ();
use IdemRecord;
use RedisFault;
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): fixed call ids that end UNKNOWN once, and counters read
# exactly; a second run finds both from the first.
use JSON::PP;

# valgrind mode stops nginx after each block: its counters start again
# with the next one (records' writes dropped, stream entries dropped, at
# TEST 17: the call's two writes are held there, and dropped past their
# timeout, each counted)
our @drops = $ENV{TEST_NGINX_USE_VALGRIND} ? (0, 0) : (2, 1);

no_long_string();
no_shuffle();
run_tests();

# a field of a record, whichever form it is in (short, or a hash)
sub field {
    my ($key, $name, $port) = @_;
    my %f = IdemRecord::fields($port // $ENV{TEST_NGINX_REDIS_PORT}, $key);
    return $f{$name} // '';
}

sub redis {
    my ($args) = @_;
    my $out = `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} $args`;
    chomp $out;
    return $out;
}

# the stream's entries: [[id, {field => value}], ...]
sub entries {
    my ($key, $port) = @_;
    my $lua = "return cjson.encode(redis.call('XRANGE', KEYS[1], '-', '+'))";
    my $json = $port
        ? `redis-cli -p $port eval "$lua" 1 '$key'`
        : redis("eval \"$lua\" 1 '$key'");
    chomp $json;
    my $list = $json eq '{}' ? [] : decode_json($json);
    return map { [$_->[0], { @{ $_->[1] } }] } @$list;
}

__DATA__

=== TEST 1: UNKNOWN calls are appended; SUCCESS, FAILED and routes without records are not
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_node_id gw-stream;
    idem_unknown_stream comp;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/2000/9;
    }
    location /ok {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /refused {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:1;
    }
    location /503 {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/9;
    }
    location /norecord {
        idem on;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/2000/9;
    }
    location /off {
        idem on;
        idem_record on;
        idem_unknown_stream off;
        proxy_read_timeout 200ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/2000/9;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /t?card=4111\nx=1", "GET /ok", "GET /refused", "GET /503", "GET /norecord", "GET /off"]
--- more_headers eval
["X-Call-Id: us-unknown\nX-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736",
 "X-Call-Id: us-ok", "X-Call-Id: us-refused", "X-Call-Id: us-503",
 "X-Call-Id: us-norecord", "X-Call-Id: us-off"]
--- error_code eval
[504, 200, 502, 503, 504, 504]
--- wait: 0.1
--- no_error_log
[alert]
[crit]



=== TEST 2: one entry, with the call's fields; its key and token find the record
--- init
my @e = main::entries('idem:comp');
Test::More::is(scalar(@e), 1, "one entry in idem:comp");
my $f = $e[0][1];
Test::More::is($f->{call_id}, 'us-unknown', 'call_id');
Test::More::is($f->{trace_id}, '4bf92f3577b34da6a3ce929d0e0e4736', 'trace_id');
Test::More::is($f->{key}, 'idem:c:{us-unknown}', 'key');
Test::More::like($f->{token}, qr/^[0-9a-f]{16}$/, 'token');
Test::More::is($f->{method}, 'POST', 'method');
Test::More::is($f->{uri}, '/t', 'uri without its query string');
Test::More::is($f->{node}, 'gw-stream', 'node');
Test::More::is($f->{attempts}, 1, 'attempts');
Test::More::is($f->{last_outcome}, 'timeout', 'last_outcome');
Test::More::is($f->{last_sent}, 1, 'last_sent');
Test::More::is($f->{final_status}, 504, 'final_status');
Test::More::like($f->{created_ms}, qr/^1\d{12}$/, 'created_ms');
Test::More::cmp_ok($f->{ended_ms} - $f->{created_ms}, '>=', 150, 'ended_ms');
Test::More::is(join(' ', sort keys %$f),
               'attempts call_id created_ms ended_ms final_status key '
               . 'last_outcome last_sent method node token trace_id uri',
               'no other field');
my $final = main::field($f->{key}, "f:$f->{token}");
Test::More::like($final, qr/^UNKNOWN 504 (\d+) /, "the record's final write");
Test::More::is(($final =~ /^\S+ \S+ (\d+)/)[0], $f->{ended_ms},
               'ended_ms is the final write time');
--- config
    location /x {
        return 204;
    }
--- request
GET /x
--- error_code: 204
--- no_error_log
[error]



=== TEST 3: retries and a client gone: the last attempt's outcome, a prefix, a location's own stream
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_key_prefix px:;
    idem_unknown_stream comp;
--- config
    location /t {
        idem on;
        idem_record on;
        idem_idempotent on;
        idem_retry 3 backoff=1ms;
        idem_unknown_stream other;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/9;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request
GET /t/a?b=c
--- more_headers
X-Call-Id: us-retried
--- error_code: 502
--- wait: 0.1
--- no_error_log
[alert]
[crit]



=== TEST 4: ... goes to px:other, with 3 attempts
--- init
my @e = main::entries('px:other');
Test::More::is(scalar(@e), 1, "one entry in px:other");
Test::More::is(main::redis("exists px:comp"), 0, "none in px:comp");
my $f = $e[0][1];
Test::More::is($f->{key}, 'px:c:{us-retried}', 'key');
Test::More::is($f->{attempts}, 3, 'attempts');
Test::More::is($f->{last_outcome}, 'error_after_send', 'last_outcome');
Test::More::is($f->{last_sent}, 1, 'last_sent');
Test::More::is($f->{uri}, '/t/a', 'uri');
Test::More::is($f->{final_status}, 502, 'final_status');
--- config
    location /x {
        return 204;
    }
--- request
GET /x
--- error_code: 204
--- no_error_log
[error]



=== TEST 5: maxlen: the stream is trimmed (approximately: whole nodes)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        idem_unknown_stream comp maxlen=2;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/99;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
# small nodes, so that "~" trims at this size
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} config set stream-node-max-entries 2 >/dev/null");
--- request eval
["GET /t", "GET /t", "GET /t", "GET /t", "GET /t", "GET /t", "GET /t", "GET /t"]
--- error_code eval
[502, 502, 502, 502, 502, 502, 502, 502]
--- wait: 0.1
--- no_error_log
[alert]
[crit]



=== TEST 6: ... to about 2 of the 8 entries, the newest kept
--- init
my $len = main::redis("xlen idem:comp");
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} config set stream-node-max-entries 100 >/dev/null");
Test::More::cmp_ok($len, '>=', 2, "at least maxlen kept ($len)");
Test::More::cmp_ok($len, '<=', 3, "trimmed to about maxlen ($len)");
my @e = main::entries('idem:comp');
Test::More::is($e[-1][0],
               (split /\n/, main::redis("xrevrange idem:comp + - count 1"))[0],
               'the newest entry is kept');
--- config
    location /x {
        return 204;
    }
--- request
GET /x
--- error_code: 204
--- no_error_log
[error]



=== TEST 7: a dedupe scope: the entry names the record's key, not the scope's value
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream comp;
--- config
    location /t {
        idem on;
        idem_record on;
        idem_dedupe on;
        idem_dedupe_scope $http_x_tenant;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/1;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /t\na=1", "POST /t\na=1"]
--- more_headers
X-Call-Id: us-scoped
X-Tenant: tenant-secret-42
--- error_code eval
[502, 409]
--- wait: 0.1
--- no_error_log
[alert]
[crit]



=== TEST 8: ... one entry (the duplicate answered 409 ran nothing); the key is the record's
--- init
my @e = main::entries('idem:comp');
Test::More::is(scalar(@e), 1, "one entry");
my $f = $e[0][1];
Test::More::like($f->{key}, qr/^idem:s:\{[0-9a-f]{64}:us-scoped\}$/, 'key');
Test::More::unlike(join(' ', %$f), qr/tenant-secret/, "no scope value");
Test::More::like(main::field($f->{key}, "f:$f->{token}"),
                 qr/^UNKNOWN 502 /, "the record under that key");
--- config
    location /x {
        return 204;
    }
--- request
GET /x
--- error_code: 204
--- no_error_log
[error]



=== TEST 9: Redis down: the entry is held until its timeout (a status read sent after it answers 503 at its own), then lost and counted; the call is not delayed
--- http_config
    idem_redis 127.0.0.1:1;
    idem_unknown_stream comp;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/99;
    }
    location /ok {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /t", "GET /ok", "GET /calls/us-down-9", "GET /metrics"]
--- error_code eval
[502, 200, 503, 200]
--- response_body_like eval
["", "", "", qr/idem_unknown_stream_drops_total 1\n/]
--- no_error_log
[alert]
[crit]



=== TEST 10: SUCCESS and FAILED are never counted as stream drops (their writes held until their timeout, as a status read sent after them shows)
--- http_config
    idem_redis 127.0.0.1:1;
    idem_unknown_stream comp;
--- config
    location /ok {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /refused {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:1;
    }
    location /metrics {
        idem_metrics;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /ok", "GET /refused", "GET /calls/us-down-10", "GET /metrics"]
--- error_code eval
[200, 502, 503, 200]
--- response_body_like eval
["", "", "", qr/idem_record_writes_total\{result="queued"\} [1-9].*idem_unknown_stream_drops_total 0\n/s]
--- no_error_log
[alert]
[crit]



=== TEST 11: the directive's errors
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream comp maxlen=0;
--- config
--- must_die
--- error_log
maxlen must be a number from 1



=== TEST 12: a name with a character a key should not hold
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream "comp{x}";
--- config
--- must_die
--- error_log
invalid value "comp{x}" in "idem_unknown_stream" directive, a stream name takes



=== TEST 13: an unknown parameter
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream comp max=3;
--- config
--- must_die
--- error_log
invalid parameter "max=3" in "idem_unknown_stream" directive



=== TEST 14: "off" takes nothing more
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream off maxlen=3;
--- config
--- must_die
--- error_log
invalid parameter "maxlen=3" in "idem_unknown_stream" directive



=== TEST 15: twice in one context
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream comp;
    idem_unknown_stream off;
--- config
--- must_die
--- error_log
"idem_unknown_stream" directive is duplicate



=== TEST 16: Redis stopped for real, first up (the worker connected): an UNKNOWN call is appended, nothing dropped
--- init
RedisFault::start();
system("redis-cli -p $ENV{TEST_NGINX_REDIS_FAULT_PORT} flushall >/dev/null");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT connect_timeout=200ms timeout=300ms;
    idem_unknown_stream comp;
--- config
    location /t {
        idem on;
        idem_record on;
        # the arrival leaves on its own however soon the call is over:
        # TEST 17 holds two writes, not one
        idem_record_arrival_delay 0;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/99;
    }
    location /metrics {
        idem_metrics;
    }
    location /pause {
        echo_sleep 0.5;
        echo ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /pause", "GET /t", "GET /metrics"]
--- more_headers
X-Call-Id: us-fault-1
--- error_code eval
[200, 502, 200]
--- response_body_like eval
["ok", "", qr/idem_record_writes_total\{result="dropped"\} 0\n.*idem_unknown_stream_drops_total 0\n/s]
--- wait: 0.1
--- no_error_log
[alert]
[crit]



=== TEST 17: ... stopped: the call is served at once, its entry and its writes held until their timeout (a status read sent after them answers 503 at its own), then lost: the entry counted, and the arrival and the final write
--- init
Test::More::is(scalar(main::entries('idem:comp', $ENV{TEST_NGINX_REDIS_FAULT_PORT})),
               1, 'the entry written while Redis was up');
IdemWait::log_after('nginx saw the connection to Redis go',
                    qr/idem: redis "[^"]*": connection (?:lost|closed)/,
                    \&RedisFault::stop);
--- request eval
["GET /t", "GET /calls/us-fault-2", "GET /metrics"]
--- more_headers
X-Call-Id: us-fault-2
--- timeout: 3
--- error_code eval
[502, 503, 200]
--- response_body_like eval
["", "", qr/idem_record_writes_total\{result="dropped"\} 2\n.*idem_unknown_stream_drops_total 1\n/s]
--- no_error_log
[alert]
[crit]



=== TEST 18: ... restarted: entries are appended again by themselves, nothing more dropped
--- init
RedisFault::start();
# until the worker has reconnected (its backoff doubles up to 5 s)
for (1 .. 80) {
    last if `redis-cli -p $ENV{TEST_NGINX_REDIS_FAULT_PORT} client list` =~ tr/\n// > 1;
    select(undef, undef, undef, 0.1);
}
--- request eval
["GET /t", "GET /metrics"]
--- more_headers
X-Call-Id: us-fault-3
--- error_code eval
[502, 200]
--- response_body_like eval
["", qr/idem_record_writes_total\{result="queued"\} [1-9]\d*\nidem_record_writes_total\{result="dropped"\} $main::drops[0]\n.*idem_unknown_stream_drops_total $main::drops[1]\n/s]
--- wait: 0.1
--- no_error_log
[alert]
[crit]



=== TEST 19: ... the entry of the call after the restart, with its record
--- init
my @e = main::entries('idem:comp', $ENV{TEST_NGINX_REDIS_FAULT_PORT});
Test::More::is(join(' ', map { $_->[1]{call_id} } @e), 'us-fault-3',
               'only the call made after the restart (no persistence)');
Test::More::like(main::field('idem:c:{us-fault-3}', "f:$e[0][1]{token}",
                             $ENV{TEST_NGINX_REDIS_FAULT_PORT}),
                 qr/^UNKNOWN 502 /, 'its record');
--- request
GET /metrics
--- response_body_like eval
qr/idem_unknown_stream_drops_total $main::drops[1]\n/
--- no_error_log
[alert]
[crit]
