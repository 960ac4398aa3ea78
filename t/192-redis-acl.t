# An ACL user (idem_redis user= password_file=): the handshake is
# AUTH user password; a user holding exactly the rights
# docs/managed-redis.md lists (its ACL SETUSER line, read from there)
# passes records, dedupe (the short claim and the claim script), a
# waiter woken, a durable claim's WAIT, the stream, the list, a
# resolution and the status endpoint; a user with fewer rights gets the
# refusal logged with the command's name, and its claims answer 503.
# The users are made on the suite's Redis (ACL SETUSER), the default
# user left as it is for the other files.

use lib 't/lib';
use IdemPaths ();
use IdemWait ();
use IdemBg qw(bg done);
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): fixed call ids, claimed and recorded in Redis.

sub redis {
    my @args = @_;
    system('redis-cli', '-p', $ENV{TEST_NGINX_REDIS_PORT}, @args) == 0
        or die "redis-cli @args failed";
}

# the documented least rights, as docs/managed-redis.md writes them, for
# user $user with password $pass; @drop: rights taken away again
sub acl {
    my ($user, $pass, @drop) = @_;
    open my $fh, '<', "$ENV{TEST_NGINX_ROOT}/docs/managed-redis.md"
        or die "docs/managed-redis.md: $!";
    my ($line, $next);
    while (<$fh>) {
        if (/^<!-- the least rights/) { $next = 1; next }
        if ($next && /^ACL SETUSER /) { $line = $_; last }
    }
    die 'no ACL SETUSER line in docs/managed-redis.md' unless $line;
    chomp $line;
    my @words = split ' ', $line;
    splice @words, 0, 3;                  # ACL SETUSER idem-gw
    @words = map { $_ eq '>CHANGE-ME' ? ">$pass" : $_ } @words;
    redis('acl', 'setuser', $user, @words, @drop);
}

# a password file in the test's scratch folder
sub secret_file {
    my ($name, $text) = @_;
    my $dir = IdemPaths::scratch();
    open my $fh, '>', "$dir/$name" or die "$dir/$name: $!";
    print $fh $text;
    close $fh;
    return "$dir/$name";
}

our $helper;

END {
    IdemBg::stop_all();
    kill 'TERM', $helper if $helper;
}

# made before any nginx starts: a worker logs in as it starts
acl('idem-gw', 'gw-pass-1');
acl('idem-noxadd', 'gw-pass-2', '-xadd');
acl('idem-nokeys', 'gw-pass-3', 'resetkeys', '~other:*');
redis('acl', 'log', 'reset');

$ENV{TEST_NGINX_ACL_SECRET} = secret_file('gw.secret', "gw-pass-1\r\n");
$ENV{TEST_NGINX_ACL_EMPTY} = secret_file('empty.secret', "\n");

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: a recorded call and its status read, as a user with the documented rights; the password from a file (its CR LF left out)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT user=idem-gw
               password_file=$TEST_NGINX_ACL_SECRET;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- init
main::redis('flushall');
--- request eval
["POST /pay\nx=1", "GET /calls/acl-1"]
--- more_headers
X-Call-Id: acl-1
--- error_code eval
[200, 200]
--- response_body_like eval
["^n=1 attempt=1 ", '"call_id":"acl-1",.*"state":"SUCCESS"']
--- no_error_log
[error]
NOPERM



=== TEST 2: ... Redis saw that user log in, and the writes were its own
--- request
GET /t
--- config
    location /t { return 200; }
--- error_code: 200
--- init
my $list = `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} acl log`;
Test::More::unlike($list, qr/idem-gw/, 'no refusal logged for idem-gw');
my $keys = `redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} --user idem-gw --pass gw-pass-1 --no-auth-warning exists 'idem:c:{acl-1}'`;
Test::More::is($keys, "1\n", 'the record, seen as idem-gw');
--- no_error_log
[error]



=== TEST 3: dedupe as that user: the short claim (SET ... NX GET, APPEND), its replay, a 422; the claim script (idem_record_short off), its replay
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT user=idem-gw
               password=gw-pass-1;
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
--- init
main::redis('flushall');
--- request eval
["POST /d\norder=1", "POST /d\norder=1", "POST /d\norder=2", "GET /log/acl-3"]
--- more_headers eval
["X-Call-Id: acl-3", "X-Call-Id: acl-3", "X-Call-Id: acl-3", ""]
--- error_code eval
[200, 200, 422, 200]
--- response_headers eval
['!Idempotent-Replayed', 'Idempotent-Replayed: true', '', '']
--- response_body_like eval
['^n=1 ', '^n=1 ', 'idempotency-key-reused|mismatch', '\An=1 [^\n]*\n\z']
--- no_error_log
[error]
NOPERM



=== TEST 4: ... the same by the claim script (idem_record_short off)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT user=idem-gw
               password=gw-pass-1;
    idem_record_short off;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
main::redis('flushall');
--- request eval
["POST /d\norder=1", "POST /d\norder=1"]
--- more_headers
X-Call-Id: acl-4
--- error_code eval
[200, 200]
--- response_headers eval
['!Idempotent-Replayed', 'Idempotent-Replayed: true']
--- no_error_log
[error]
NOPERM



=== TEST 5: a waiter as that user: SUBSCRIBE to the prefix's channel, woken by the owner's PUBLISH, the answer replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT user=idem-gw
               password=gw-pass-1;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_wait 10s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
--- init
main::redis('flushall');
main::bg('owner5', 'acl-5', '/pay', '--data', 'x=1');
IdemWait::owner_in('acl-5');
$main::helper = IdemWait::release_when('acl-5', \&IdemWait::parked, 1);
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: acl-5
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
--- response_body_like eval
'^n=1 attempt=1 '
--- error_log eval
qr/idem redis: SUBSCRIBE "idem:wake" sent/
--- no_error_log
[error]
NOPERM



=== TEST 6: ... the owner's own answer, and the waiter was woken, not polling
--- config
    location /t { return 200; }
--- init
kill 'TERM', $main::helper if $main::helper;
my $owner = main::done('owner5');
Test::More::like($owner, qr{^HTTP/1\.1 200 }, 'the owner: 200');
--- request
GET /t
--- error_code: 200
--- no_error_log
[error]



=== TEST 7: a durable claim's WAIT as that user: no replica here, so 503 claim-not-durable (WAIT answered 0), the claim released
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT user=idem-gw
               password=gw-pass-1;
--- config
    location /w {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_durable replicas=1 timeout=50ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
main::redis('flushall');
--- request eval
["POST /w\nx=1", "POST /w\nx=1", "GET /log/acl-7"]
--- more_headers eval
["X-Call-Id: acl-7", "X-Call-Id: acl-7", ""]
--- error_code eval
[503, 503, 200]
--- response_body_like eval
['"type":"urn:ngx-idem:problem:claim-not-durable"',
 '"type":"urn:ngx-idem:problem:claim-not-durable"', '\A\z']
--- no_error_log
[error]
NOPERM



=== TEST 8: the stream, the list and a resolution as that user: an UNKNOWN call listed, resolved applied, gone from the list, its resend 409 call-applied
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT user=idem-gw
               password=gw-pass-1;
    idem_unknown_stream people;
--- config
    location /pay {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_read_timeout 100ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /_idem/calls/ {
        idem_status resolve=on;
    }
--- init
main::redis('flushall');
--- request eval
["POST /pay\nx=1", "GET /_idem/calls/",
 "POST /_idem/calls/acl-8\n{\"outcome\": \"applied\", \"by\": \"ops\"}",
 "GET /_idem/calls/", "GET /_idem/calls/acl-8", "POST /pay\nx=1"]
--- more_headers eval
["X-Call-Id: acl-8", "Accept: application/json", "",
 "Accept: application/json", "Accept: application/json", "X-Call-Id: acl-8"]
--- error_code eval
[504, 200, 200, 200, 200, 409]
--- response_body_like eval
["", '^\{"calls":\[\{"call_id":"acl-8","state":"UNKNOWN",',
 '"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"applied",',
 '^\{"calls":\[\],', '"state":"SUCCESS"', 'call-applied']
--- no_error_log
NOPERM
[alert]



=== TEST 9: fewer rights (no XADD): the refusal is logged with the command's name; the call is still answered
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT user=idem-noxadd
               password=gw-pass-2;
    idem_unknown_stream people;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 100ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
--- init
main::redis('flushall');
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: acl-9
--- error_code: 504
--- error_log eval
qr/NOPERM[^\n]*'xadd'/i



=== TEST 10: keys outside its pattern: a claim refused answers 503, nothing forwarded; the refusal reported with the command Redis refused (its NOPERM for a key does not name it)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT user=idem-nokeys
               password=gw-pass-3;
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
--- init
main::redis('flushall');
for my $n (1, 2) {
    my $out = `curl -s -o /dev/null -w '%{http_code}' -H 'X-Call-Id: acl-10' --data x=1 http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/d`;
    Test::More::is($out, '503', "claim $n refused: 503");
}
IdemWait::log_ok('the refusal reported with its command',
                 qr/failed \(last error: "NOPERM [^"]*", to (SET|EVALSHA)\)/);
--- request
GET /log/acl-10
--- error_code: 200
--- response_body_like: \A\z



=== TEST 11: user= without a password fails nginx -t
--- http_config
    idem_redis 127.0.0.1:6379 user=idem-gw;
--- config
    location /t { return 200; }
--- must_die
--- error_log
"idem_redis": "user=idem-gw" needs "password=" or "password_file="



=== TEST 12: a password file that is not there fails nginx -t, naming it
--- http_config
    idem_redis 127.0.0.1:6379 user=idem-gw password_file=/nonexistent/redis.secret;
--- config
    location /t { return 200; }
--- must_die
--- error_log
open() "/nonexistent/redis.secret" failed



=== TEST 13: an empty password file fails nginx -t
--- http_config
    idem_redis 127.0.0.1:6379 password_file=$TEST_NGINX_ACL_EMPTY;
--- config
    location /t { return 200; }
--- must_die
--- error_log
has an empty first line



=== TEST 14: password= and password_file= together
--- http_config
    idem_redis 127.0.0.1:6379 password=x password_file=$TEST_NGINX_ACL_SECRET;
--- config
    location /t { return 200; }
--- must_die
--- error_log eval
qr/invalid parameter "password_file=[^"]*" in "idem_redis" directive/



=== TEST 15: a wrong password for the user: one line naming the node and Redis's refusal; the status endpoint answers 503
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT user=idem-gw
               password=wrong timeout=300ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
IdemWait::log_ok('the AUTH refused', qr/AUTH failed: "WRONGPASS/);
--- request
GET /calls/acl-15
--- error_code: 503
--- error_log eval
qr/idem: redis "127\.0\.0\.1:\d+": AUTH failed: "WRONGPASS invalid username-password pair/
--- no_error_log
[alert]
[crit]
