# A new call id's dedupe claim is one plain command that makes a short
# record (SET ... PX ... NX GET: the owner, digest, lease, bound, arrival
# and "v" as "<field> <length> <value>\n" each), and its owner's writes
# add to that string (APPEND): no script runs for a new call
# (docs/performance.md, issue 46).  The lease and the bound are written
# relative to the expiry the SET sets ("+<ms> <ttl>"), which every reader
# turns into Redis's time.  Duplicates read the string where it is
# (claim script) without making it a hash; a hash there by then takes the
# owner's writes through the upgrade script (t/114 TEST 8).  With
# idem_record_short off the claim is the script's hash, as before.  A
# Redis that refuses SET with NX and GET (5 and 6) gets one notice, then
# every claim by script; another error (a Redis out of memory) sends only
# that claim by script.  Each block's --- init looks at what the block
# before it left.

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use IdemRecord;
use IdemWait;
use Digest::SHA;
use RedisHoldProxy ();
use IdemBg qw(bg done);

# No repeat_each(2): each block reads the record of a fixed call id.

# TEST 14-15: Redis behind a proxy that refuses SET with NX and GET, as
# Redis 5 and 6 do
our ($Refusing, $RefusingPid);
BEGIN {
    $Refusing = ($ENV{TEST_NGINX_REDIS_PORT} || 16379) + 490;
    $ENV{TEST_NGINX_REFUSING_REDIS} = $Refusing;
}
$RefusingPid = RedisHoldProxy::start($Refusing, $ENV{TEST_NGINX_REDIS_PORT},
                                     IdemPaths::scratch() . '/no-hold',
                                     refuse_set_get => 1);
END { local $?; RedisHoldProxy::stop($RefusingPid) }

no_long_string();
no_shuffle();
run_tests();

sub redis {
    my $out = `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} @_`;
    chomp $out;
    return $out;
}

sub record { IdemRecord::fields($ENV{TEST_NGINX_REDIS_PORT}, @_) }
sub type   { IdemRecord::type($ENV{TEST_NGINX_REDIS_PORT}, @_) }

# the record of $key once its owner's final write ("k:") is in, and
# Redis's command counts from before the test's own reads (IdemRecord's
# reader is a script): waited for with GET and HKEYS
sub final_record {
    my ($key) = @_;
    IdemWait::wait_for("the final write of $key", sub {
        my $t = type($key);
        my $v = $t eq 'string' ? redis('get', "'$key'")
              : $t eq 'hash' ? redis('hkeys', "'$key'") : '';
        return $v =~ /^k:/m;
    });
    our %Calls = map { $_ => calls($_) } qw(eval evalsha set append);
    return record($key);
}

# a string at $key, as a short record is, with its expiry
sub put {
    my ($key, $value, $px) = @_;
    open my $p, '|-', "redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} -x set '$key' >/dev/null"
        or die "redis-cli: $!";
    print $p $value;
    close $p;
    redis('pexpire', "'$key'", $px);
}

# a POST of "pay" to /d under call id $id, its answer (headers and body)
sub call {
    my ($id) = @_;
    return scalar `curl -s -i --noproxy '*' --max-time 10 -H 'X-Call-Id: $id' --data-binary pay http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/d`;
}

# calls of a command since the last CONFIG RESETSTAT (0: none)
sub calls {
    my ($cmd) = @_;
    my $info = redis('info commandstats');
    return $info =~ /^cmdstat_\Q$cmd\E:calls=(\d+)/m ? $1 : 0;
}

__DATA__

=== TEST 1: a new call on a dedupe route: forwarded once
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_ttl 10m;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_deadline 30s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} config resetstat >/dev/null");
--- request
POST /d
pay
--- more_headers
X-Call-Id: sc-1
--- error_code: 200
--- response_body_like: ^n=1 
--- no_error_log
[error]



=== TEST 2: ... its record: one string, the claim's fields, then the owner's; no script ran, one SET and one APPEND
--- init
my %r = main::final_record('idem:c:{sc-1}');
Test::More::is(main::type('idem:c:{sc-1}'), 'string', 'a short record');
my $o = $r{o} // '';
Test::More::like($o, qr/^[0-9a-f]{16,32}$/, 'its owner');
Test::More::like($r{d} // '', qr/^[0-9a-f]{64}$/, 'the digest');
Test::More::like($r{"l:$o"} // '', qr/^\+\d+ 600000$/,
                 'the lease, from the expiry the SET set');
Test::More::like($r{"b:$o"} // '', qr/^\+(\d+) 600000$/,
                 'the bound, the same way (the budget and 5 s)');
Test::More::like($r{"e:$o"} // '', qr{^R \d+ client \S+ POST [0-9a-f]{32} /d$},
                 'the arrival');
Test::More::is($r{v}, '1', 'v');
Test::More::like($r{"f:$o"} // '', qr/^SUCCESS 200 /, 'the end');
Test::More::ok(defined $r{"a:$o:1"}, 'its attempt');
Test::More::is($r{"k:$o"}, 'R', 'the answer kept');
Test::More::like($r{r} // '', qr/^200\b/, '... stored');
my $pttl = main::redis('pttl', "'idem:c:{sc-1}'");
Test::More::cmp_ok($pttl, '>', 500000, "its expiry (${pttl} ms)");
Test::More::is($main::Calls{evalsha} + $main::Calls{eval}, 0, 'no script');
Test::More::is($main::Calls{set}, 1, 'one SET');
Test::More::cmp_ok($main::Calls{append}, '>=', 1, 'APPEND');
--- config
    location /t { return 200; }
--- request
GET /t
--- no_error_log
[error]



=== TEST 3: its duplicate is replayed, and the record stays a string (read where it is); another body under the id: 422
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_ttl 10m;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_deadline 30s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request eval
["POST /d\npay", "POST /d\nother"]
--- more_headers eval
["X-Call-Id: sc-1", "X-Call-Id: sc-1"]
--- error_code eval
[200, 422]
--- response_body_like eval
["^n=1 ", "payload-mismatch"]
--- response_headers eval
["Idempotent-Replayed: true", "!Idempotent-Replayed"]
--- no_error_log
[error]



=== TEST 4: ... (a string still, the backend ran the call once)
--- init
Test::More::is(main::type('idem:c:{sc-1}'), 'string', 'a short record still');
Test::More::is(IdemWait::backend_runs('sc-1'), 1, 'run once');
--- config
    location /t { return 200; }
--- request
GET /t
--- no_error_log
[error]



=== TEST 5: a short claim whose owner runs (by hand: the lease 60 s from its expiry): a duplicate gets 409 call-in-flight, and the status endpoint reads the lease as not lapsed (RECEIVED, not UNKNOWN)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- init
my $t = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa';
my $e = "R 1796594859599 client vm POST bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb /d";
my $v = join '', map { "$_->[0] " . length($_->[1]) . " $_->[1]\n" }
    ['o', $t], ['d', Digest::SHA::sha256_hex("POST /d\npay")], ["l:$t", '+60000 600000'], ["b:$t", '-'],
    ["e:$t", $e], ['v', '1'];
main::put('idem:c:{sc-5}', $v, 600000);
--- request eval
["POST /d\npay", "GET /calls/sc-5"]
--- more_headers eval
["X-Call-Id: sc-5", ""]
--- error_code eval
[409, 200]
--- response_body_like eval
["call-in-flight", '"state":"RECEIVED"']
--- no_error_log
[error]



=== TEST 6: ... (nothing ran, the record a string still)
--- init
Test::More::is(IdemWait::backend_runs('sc-5'), 0, 'not run');
Test::More::is(main::type('idem:c:{sc-5}'), 'string', 'a short record still');
--- config
    location /t { return 200; }
--- request
GET /t
--- no_error_log
[error]



=== TEST 7: a short claim that lapsed (its lease 1 ms, a second of its expiry gone): a duplicate gets 409 call-outcome-unknown, and the status says UNKNOWN
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- init
my $t = 'cccccccccccccccccccccccccccccccc';
my $e = "R 1796594859599 client vm POST bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb /d";
my $v = join '', map { "$_->[0] " . length($_->[1]) . " $_->[1]\n" }
    ['o', $t], ['d', Digest::SHA::sha256_hex("POST /d\npay")], ["l:$t", '+1 600000'], ["b:$t", '-'],
    ["e:$t", $e], ['v', '1'];
main::put('idem:c:{sc-7}', $v, 599000);
--- request eval
["POST /d\npay", "GET /calls/sc-7"]
--- more_headers eval
["X-Call-Id: sc-7", ""]
--- error_code eval
[409, 200]
--- response_body_like eval
["call-outcome-unknown", '"state":"UNKNOWN"']
--- no_error_log
[error]



=== TEST 8: a call that outlives the arrival delay: its "p:" is added to the short claim, which stays a string, no script
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_record_arrival_delay 0;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} config resetstat >/dev/null");
--- request
POST /d
pay
--- more_headers
X-Call-Id: sc-8
--- error_code: 200
--- no_error_log
[error]



=== TEST 9: ... (a string with its "p:", the end after it)
--- init
my %r = main::final_record('idem:c:{sc-8}');
Test::More::is(main::type('idem:c:{sc-8}'), 'string', 'a short record');
Test::More::ok(defined $r{"p:$r{o}"}, 'its attempt started ("p:")');
Test::More::like($r{"f:$r{o}"} // '', qr/^SUCCESS 200 /, 'its end');
Test::More::is($main::Calls{evalsha} + $main::Calls{eval}, 0, 'no script');
--- config
    location /t { return 200; }
--- request
GET /t
--- no_error_log
[error]



=== TEST 10: idem_record_short off: the claim is the script's, a hash
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_record_short off;
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
X-Call-Id: sc-10
--- error_code: 200
--- no_error_log
[error]



=== TEST 11: ... (a hash with the claim and the answer)
--- init
my %r = main::final_record('idem:c:{sc-10}');
Test::More::is(main::type('idem:c:{sc-10}'), 'hash', 'a hash');
Test::More::like($r{"l:$r{o}"} // '', qr/^\d+$/, "the lease in Redis's time");
Test::More::is($r{"k:$r{o}"}, 'R', 'the answer kept');
--- config
    location /t { return 200; }
--- request
GET /t
--- no_error_log
[error]



=== TEST 12: a call id used on a record-only route first (a short record without a claim): the dedupe claim goes over it by script, forwarded, and the record becomes the hash of both
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
--- init
Test::More::ok(IdemWait::wait_for('nothing of sc-12',
                   sub { main::type('idem:c:{sc-12}') eq 'none' }), 'new id');
--- request eval
["GET /r", "POST /d\npay"]
--- more_headers eval
["X-Call-Id: sc-12", "X-Call-Id: sc-12"]
--- error_code eval
[200, 200]
--- response_body_like eval
["^n=1 ", "\nn=2 "]
--- no_error_log
[error]



=== TEST 13: ... (a hash: the claim and two executions)
--- init
my %r = main::final_record('idem:c:{sc-12}');
Test::More::is(main::type('idem:c:{sc-12}'), 'hash', 'a hash');
my %t = map { /^[ef]:(.+)$/ ? ($1 => 1) : () } keys %r;
Test::More::is(scalar(keys %t), 2, 'two executions');
Test::More::is($r{"k:$r{o}"}, 'R', "the claim's answer kept");
--- config
    location /t { return 200; }
--- request
GET /t
--- no_error_log
[error]



=== TEST 14: a Redis that refuses SET with NX and GET (5, 6): one notice, then every claim by script; the calls go on
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REFUSING_REDIS;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
Test::More::ok(IdemWait::wait_for('nothing of sc-14',
                   sub { main::type('idem:c:{sc-14a}') eq 'none'
                         && main::type('idem:c:{sc-14b}') eq 'none' }),
               'new ids');
--- request eval
["POST /d\npay", "POST /d\npay"]
--- more_headers eval
["X-Call-Id: sc-14a", "X-Call-Id: sc-14b"]
--- error_code eval
[200, 200]
--- response_body_like eval
["^n=1 ", "^n=1 "]
--- no_error_log
[error]



=== TEST 15: ... (each claim the script's hash, the notice once; the same id again is replayed, the same nginx)
--- init
for my $id (qw(sc-14a sc-14b)) {
    my %r = main::final_record("idem:c:{$id}");
    Test::More::is(main::type("idem:c:{$id}"), 'hash', "$id: a hash");
    Test::More::is($r{"k:$r{o}"}, 'R', "$id: the answer kept");
}
Test::More::is(IdemWait::log_count(qr/\[notice\].*Redis refused a short claim/),
               1, 'one notice');
Test::More::is(IdemWait::log_count(qr/claim of "idem:c:\{sc-14b\}" sent, .*by script/),
               1, 'the next claim by script at once');
--- request
POST /d
pay
--- more_headers
X-Call-Id: sc-14a
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
--- response_body_like eval
qr/^n=1 /
--- no_error_log
[error]



=== TEST 16: a short claim made a hash (a resolution asked too early) keeps its lease in Redis's time: an expiry moved after that (an owner's final PEXPIRE that lands before its fields, which met the hash and go by script) leaves the lapsed lease lapsed (UNKNOWN, not RECEIVED)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_lease 300ms;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
    location /calls/ {
        idem_status resolve=on;
    }
--- init
my $key = 'idem:c:{sc-16}';
main::redis('del', "'$key'");
my $base = "http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}";
main::bg('owner16', 'sc-16', '/pay', '--data', 'x=1');
Test::More::ok(IdemWait::wait_for('the owner at the backend',
                   sub { IdemWait::backend_runs('sc-16') >= 1 }),
               'the owner is at the backend');
Test::More::is(main::type($key), 'string', 'a short claim');
Test::More::ok(IdemWait::wait_for('its lease lapsed', sub {
    IdemWait::get($ENV{TEST_NGINX_SERVER_PORT}, '/calls/sc-16')
        =~ /"state":"UNKNOWN"/ }), 'its lease lapsed: UNKNOWN');
my $r = `curl -s -i --max-time 10 -X POST --data '{"outcome":"not_applied"}' $base/calls/sc-16`;
Test::More::like($r, qr{^HTTP/1.1 409 .*resolution-too-early}s,
                 'a resolution too early (no bound: the owner may answer)');
Test::More::is(main::type($key), 'hash', '... made it a hash');
my %f = main::record($key);
my ($l) = grep { /^l:/ } keys %f;
my $raw = main::redis('hget', "'$key'", $l);
Test::More::like($raw, qr/^\d{13}$/, "its lease in Redis's time ($raw)");
main::redis('pexpire', "'$key'", 86400000);
Test::More::like(IdemWait::get($ENV{TEST_NGINX_SERVER_PORT}, '/calls/sc-16'),
                 qr/"state":"UNKNOWN"/,
                 'its expiry moved a day on: still UNKNOWN');
IdemWait::release('sc-16');
Test::More::like(main::done('owner16'), qr{^HTTP/1\.1 200 }, 'the owner: 200');
Test::More::ok(IdemWait::wait_for('its final write', sub {
    IdemWait::get($ENV{TEST_NGINX_SERVER_PORT}, '/calls/sc-16')
        =~ /"state":"SUCCESS"/ }), 'then its final write: SUCCESS');
--- request
GET /calls/sc-16
--- response_body_like eval
qr/"state":"SUCCESS"/
--- no_error_log
[error]



=== TEST 17: a Redis out of memory (maxmemory 1: OOM to every write) answers a short claim with an error: that claim asks by script (OOM too: 503, nothing forwarded), a duplicate of a short record is still replayed by script; the worker goes on claiming with SET ... NX GET
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
main::redis('del', "'idem:c:{sc-17a}'", "'idem:c:{sc-17b}'", "'idem:c:{sc-17c}'");
Test::More::like(main::call('sc-17a'), qr{^HTTP/1.1 200 }, 'a call: 200');
main::final_record('idem:c:{sc-17a}');
Test::More::is(main::type('idem:c:{sc-17a}'), 'string', '... a short record');
main::redis('config set maxmemory 1');
my $oom = main::call('sc-17b');
my $dup = main::call('sc-17a');
main::redis('config set maxmemory 0');
Test::More::like($oom, qr{^HTTP/1.1 503 .*dedupe-unavailable}s,
                 'a new id while Redis is out of memory: 503');
Test::More::is(IdemWait::backend_runs('sc-17b'), 0, '... not forwarded');
Test::More::is(main::type('idem:c:{sc-17b}'), 'none', '... no record');
Test::More::like($dup, qr{^HTTP/1.1 200 .*Idempotent-Replayed: true}s,
                 'a duplicate then: replayed (the script reads)');
IdemWait::log_ok('the OOM reported',
                 qr/\[error\].*since the last report: .*failed \(last error: "OOM /);
--- request
POST /d
pay
--- more_headers
X-Call-Id: sc-17c
--- error_code: 200
--- response_body_like: ^n=1 
--- error_log eval
qr/claim of "idem:c:\{sc-17c\}" sent, 0 replicas, short/
--- no_error_log
[crit]
[alert]
Redis refused a short claim



=== TEST 18: ... (the claim after the OOM made a short record)
--- init
my %r = main::final_record('idem:c:{sc-17c}');
Test::More::is(main::type('idem:c:{sc-17c}'), 'string', 'a short record');
Test::More::is($r{"k:$r{o}"}, 'R', 'the answer kept');
--- config
    location /t { return 200; }
--- request
GET /t
--- no_error_log
[error]
