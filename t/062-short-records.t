# Short records: a call whose one write makes its record (over within
# idem_record_arrival_delay, its id new, no dedupe) is stored as one string
# set with its expiry (SET ... PX ... NX).  Whatever needs the hash later
# (the id sent again, a long execution, a dedupe claim) turns it into the
# hash with the same fields first.  Each block's --- init looks at what the
# block before it left.  The record locations wait 1s before an arrival
# (idem_record_arrival_delay), so that every call is over in one write
# however slow the run (valgrind); a block whose write meets a record
# there already waits longer after its requests (the upgrade is one or two
# round trips more, and Test::Nginx's nginx does not wait for them when it
# stops: master_process off).

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): each block reads the record of a fixed call id, which a
# second run would find with one execution more (--- init runs once).
use IdemRecord;
use IdemWait;

no_long_string();
no_shuffle();
run_tests();

sub record { IdemRecord::fields($ENV{TEST_NGINX_REDIS_PORT}, @_) }
sub type   { IdemRecord::type($ENV{TEST_NGINX_REDIS_PORT}, @_) }

sub redis {
    my $out = `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} @_`;
    chomp $out;
    return $out;
}

# executions of a record: its e:/f: tokens
sub executions {
    my (%r) = @_;
    my %t = map { /^[ef]:(.+)$/ ? ($1 => 1) : () } keys %r;
    return scalar keys %t;
}

__DATA__

=== TEST 1: a call over at once: its record is short
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_ttl 10m;
--- config
    location /t {
        idem on;
        idem_record on;
        idem_record_arrival_delay 1s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request
GET /t
--- more_headers
X-Call-Id: sr-1
--- wait: 0.05
--- response_body_like: n=1
--- no_error_log
[error]



=== TEST 2: ... one string of its fields with the TTL: no arrival of its own, its attempt, "v"; the status endpoint reads it
--- init
Test::More::is(main::type('idem:c:{sr-1}'), 'string', 'a short record');
my %r = main::record('idem:c:{sr-1}');
my @f = sort keys %r;
Test::More::is(scalar(@f), 3, "three fields (@f)");
Test::More::is(scalar(grep { /^f:[0-9a-f]+$/ } @f), 1, 'its end');
Test::More::is(scalar(grep { /^a:[0-9a-f]+:1$/ } @f), 1, 'its attempt');
Test::More::is($r{v}, '1', 'v');
my ($f) = grep { /^f:/ } @f;
Test::More::like($r{$f}, qr{^SUCCESS 200 \d+ \d+ client \S+ GET [0-9a-f]{32} /t$},
                 'the end, with the arrival');
my $ttl = main::redis("pttl 'idem:c:{sr-1}'");
Test::More::cmp_ok($ttl, '>', 590_000, "idem_record_ttl 10m ($ttl ms)");
Test::More::cmp_ok($ttl, '<=', 600_000, "idem_record_ttl 10m ($ttl ms)");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
--- request
GET /calls/sr-1
--- response_body_like: ^\{"call_id":"sr-1",.*"state":"SUCCESS",.*"method":"GET","uri":"/t",.*"final_status":200,"executions":1,"attempts":\[\{"execution":1,"n":1,.*"outcome":"ok","sent":true,"status":200,
--- no_error_log
[error]



=== TEST 3: the same id again, over at once too: the record becomes a hash of both executions, counted once
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_ttl 20m;
--- config
    location /t {
        idem on;
        idem_record on;
        idem_record_arrival_delay 1s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request
GET /t
--- more_headers
X-Call-Id: sr-1
--- wait: 0.5
--- response_body_like: n=2
--- no_error_log
[error]



=== TEST 4: ... the hash holds the short record's fields as they were, the new ones, the count and the new TTL
--- init
Test::More::is(main::type('idem:c:{sr-1}'), 'hash', 'a hash now');
my %r = main::record('idem:c:{sr-1}');
Test::More::is(main::executions(%r), 2, 'two executions');
Test::More::is($r{n}, '1', 'counted: one after the first');
Test::More::is(scalar(grep { /^a:/ } keys %r), 2, 'two attempts');
my $ttl = main::redis("pttl 'idem:c:{sr-1}'");
Test::More::cmp_ok($ttl, '>', 1_190_000, "refreshed to 20m ($ttl ms)");
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
--- request
GET /calls/sr-1
--- response_body_like: "state":"SUCCESS",.*"executions":2,"attempts":\[\{"execution":1,"n":1,.*\},\{"execution":2,"n":1,
--- no_error_log
[error]



=== TEST 5: a short record, then an execution of its id that writes its arrival first (idem_record_arrival_delay 0): both of its writes meet the short record
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /short {
        idem on;
        idem_record on;
        idem_record_arrival_delay 1s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /long {
        idem on;
        idem_record on;
        idem_record_arrival_delay 0;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /short", "GET /long"]
--- more_headers eval
["X-Call-Id: sr-5", "X-Call-Id: sr-5"]
--- wait: 0.5
--- error_code eval
[200, 200]
--- response_body_like eval
["n=1 ", "n=2 "]
--- no_error_log
[error]



=== TEST 6: ... a hash with the first execution's end and the second's arrival, end and attempt
--- init
Test::More::is(main::type('idem:c:{sr-5}'), 'hash', 'a hash');
my %r = main::record('idem:c:{sr-5}');
my @f = sort keys %r;
Test::More::is(main::executions(%r), 2, "two executions (@f)");
Test::More::is(scalar(grep { /^e:/ } @f), 1, "one arrival of its own (@f)");
Test::More::is(scalar(grep { /^f:/ } @f), 2, "two ends (@f)");
Test::More::is($r{n}, '1', 'counted once');
Test::More::like(main::redis("pttl 'idem:c:{sr-5}'"), qr/^\d{8}$/,
                 'the TTL kept (a day)');
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
--- request
GET /calls/sr-5
--- response_body_like: "state":"SUCCESS",.*"uri":"/short",.*"executions":2,"attempts":\[\{"execution":1,"n":1,.*"outcome":"ok".*\},\{"execution":2,"n":1,.*"outcome":"ok"
--- no_error_log
[error]



=== TEST 7: a short record, then a dedupe claim of its id: claimed through the upgrade, forwarded, and its duplicate replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /r {
        idem on;
        idem_record on;
        idem_record_arrival_delay 1s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request eval
["GET /r", "POST /d\npay", "POST /d\npay"]
--- more_headers eval
["X-Call-Id: sr-7", "X-Call-Id: sr-7", "X-Call-Id: sr-7"]
--- wait: 0.5
--- error_code eval
[200, 200, 200]
--- response_body_like eval
["n=1 ", "n=2 ", "n=2 "]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", "Idempotent-Replayed: true"]
--- no_error_log
[error]



=== TEST 8: ... the record: a hash with the claim's fields and both executions
--- init
Test::More::is(main::type('idem:c:{sr-7}'), 'hash', 'a hash');
my %r = main::record('idem:c:{sr-7}');
Test::More::is(main::executions(%r), 2, 'two executions');
Test::More::ok(defined $r{o} && defined $r{d} && defined $r{r},
               'the claim: owner, digest, answer');
Test::More::is($r{"k:$r{o}"}, 'R', 'its answer stored');
--- config
    location /t { return 200; }
--- request
GET /t
--- no_error_log
[error]



=== TEST 9: a URI with UTF-8 bytes, as sent, in a short record, and after its upgrade
The lengths count bytes: a character of two bytes must not shift the
fields after it.
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t/ {
        idem on;
        idem_record on;
        idem_record_arrival_delay 1s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
"GET /t/caf\xc3\xa9/\xe2\x82\xac%20x"
--- more_headers
X-Call-Id: sr-9
--- wait: 0.05
--- response_body_like: n=1
--- no_error_log
[error]



=== TEST 10: ... the short record holds the URI's bytes; sent again, the hash holds the same value
--- init
my %r = main::record('idem:c:{sr-9}');
my ($f) = grep { /^f:/ } keys %r;
my ($a) = grep { /^a:/ } keys %r;
Test::More::like($r{$f}, qr{ /t/caf\x{e9}/\x{20ac}%20x$},
                 'the URI, as sent (UTF-8, decoded by the JSON reader)');
Test::More::like($r{$a}, qr/^\d+ \d+ ok 1 200 [0-9a-f]{16}$/,
                 'the attempt after it, whole');
$main::sr9 = $r{$f};
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t/ {
        idem on;
        idem_record on;
        idem_record_arrival_delay 1s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request eval
"GET /t/caf\xc3\xa9/\xe2\x82\xac%20x"
--- more_headers
X-Call-Id: sr-9
--- wait: 0.5
--- response_body_like: n=2
--- no_error_log
[error]



=== TEST 11: ... (checked), and the status endpoint reads the URI
--- init
Test::More::is(main::type('idem:c:{sr-9}'), 'hash', 'a hash');
my %r = main::record('idem:c:{sr-9}');
my $same = grep { /^f:/ && $r{$_} eq $main::sr9 } keys %r;
Test::More::is($same, 1, 'the first execution\'s end, byte for byte');
Test::More::is(scalar(grep { /^a:/ } keys %r), 2, 'both attempts');
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
--- request
GET /calls/sr-9
--- response_body_like: "uri":"/t/caf[^"]+%20x",.*"executions":2,"attempts":\[\{"execution":1,"n":1,.*"outcome":"ok".*\},\{"execution":2,
--- no_error_log
[error]



=== TEST 12: a record key that holds something else (a list): the call is served, the write refused and logged, the list left alone
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_record on;
        idem_record_arrival_delay 1s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} del 'idem:c:{sr-12}' >/dev/null");
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} rpush 'idem:c:{sr-12}' x >/dev/null");
--- request
GET /t
--- more_headers
X-Call-Id: sr-12
--- wait: 0.1
--- response_body_like: n=1
--- error_log
WRONGTYPE



=== TEST 13: ... (the list)
--- init
Test::More::is(main::type('idem:c:{sr-12}'), 'list', 'still a list');
Test::More::is(main::redis("lrange 'idem:c:{sr-12}' 0 -1"), 'x', 'as it was');
--- config
    location /t { return 200; }
--- request
GET /t
--- no_error_log
[error]



=== TEST 14: a dedupe route's new call: its claim makes the record short too (t/101), its owner's final write adds to it
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request
POST /d
pay
--- more_headers
X-Call-Id: sr-14
--- wait: 0.05
--- response_body_like: n=1
--- no_error_log
[error]



=== TEST 15: ... (a string: the claim and the final write)
--- init
Test::More::ok(IdemWait::wait_for('the final write of sr-14', sub {
    my %r = main::record('idem:c:{sr-14}');
    return grep { /^k:/ } keys %r;
}), 'the final write is in');
Test::More::is(main::type('idem:c:{sr-14}'), 'string', 'a short record');
--- config
    location /t { return 200; }
--- request
GET /t
--- no_error_log
[error]



=== TEST 16: idem_record_short off: a call over at once makes a hash, as before short records
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_short off;
--- config
    location /t {
        idem on;
        idem_record on;
        idem_record_arrival_delay 1s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request
GET /t
--- more_headers
X-Call-Id: sr-16
--- wait: 0.05
--- response_body_like: n=1
--- no_error_log
[error]



=== TEST 17: ... (a hash of the same three fields)
--- init
Test::More::is(main::type('idem:c:{sr-16}'), 'hash', 'a hash');
my %r = main::record('idem:c:{sr-16}');
my @f = sort keys %r;
Test::More::is(scalar(@f), 3, "three fields (@f)");
Test::More::is($r{v}, '1', 'v');
Test::More::cmp_ok(main::redis("pttl 'idem:c:{sr-16}'"), '>', 86_000_000,
                   'the TTL');
--- config
    location /t { return 200; }
--- request
GET /t
--- no_error_log
[error]



=== TEST 18: idem_record_short takes on or off
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_short maybe;
--- config
    location /t { return 200; }
--- must_die
--- error_log
invalid value "maybe" in "idem_record_short" directive, it must be "on" or "off"



=== TEST 19: idem_record_short is an http directive
--- config
    location /t { idem_record_short off; }
--- must_die
--- error_log
"idem_record_short" directive is not allowed here
