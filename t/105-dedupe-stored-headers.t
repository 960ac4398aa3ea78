# What a stored answer keeps of the owner's headers (idem_dedupe): never
# Set-Cookie, so that a duplicate from another caller (idem_dedupe_scope
# off, or a scope coarser than a session) never gets the first caller's
# session.  Stored headers in general: t/100-dedupe.t TEST 2.

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use IdemRecord;

# No repeat_each(2): dedupe of fixed call ids: the second run's first call is
# a replay of the first run's (--- init flushes Redis once per block).

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: scope off: the first answer sets its cookies, the replay to another caller none
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/login;
    }
    location /login {
        add_header X-Order 42;
        add_header Set-Cookie "session=alice-secret; Path=/; HttpOnly";
        add_header set-cookie "theme=dark";
        return 200 "logged in\n";
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /d\nuser=1", "POST /d\nuser=1"]
--- more_headers eval
["X-Call-Id: ck-1\r\nCookie: who=alice", "X-Call-Id: ck-1\r\nCookie: who=bob"]
--- response_headers eval
['!Idempotent-Replayed' . "\n" . 'X-Order: 42',
 'Idempotent-Replayed: true' . "\n" . 'X-Order: 42' . "\n" . '!Set-Cookie']
--- raw_response_headers_like eval
['Set-Cookie: session=alice-secret; Path=/; HttpOnly\r\n.*set-cookie: theme=dark\r\n',
 '\A(?![\s\S]*(?i:set-cookie))']
--- response_body eval
["logged in\n", "logged in\n"]
--- no_error_log
[error]



=== TEST 2: the cookies never reach the store
--- init
my %f = IdemRecord::fields($ENV{TEST_NGINX_REDIS_PORT}, 'idem:c:{ck-1}');
my $r = $f{r} // '';
Test::More::like($r, qr/^200 .*\nX-Order: 42\n/s, "the answer of ck-1 is stored");
Test::More::unlike($r, qr/cookie|alice-secret|theme=dark/i, "without its cookies");
--- config
    location /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- no_error_log
[error]



=== TEST 3: a coarse scope (a tenant): a colleague's duplicate gets no cookie either
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope $http_x_tenant;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/login;
    }
    location /login {
        add_header Set-Cookie "session=$http_x_user";
        return 201 "created\n";
    }
--- request eval
["POST /d\norder=7", "POST /d\norder=7"]
--- more_headers eval
["X-Call-Id: ck-3\r\nX-Tenant: acme\r\nX-User: alice",
 "X-Call-Id: ck-3\r\nX-Tenant: acme\r\nX-User: bob"]
--- error_code eval
[201, 201]
--- response_headers eval
['Set-Cookie: session=alice' . "\n" . '!Idempotent-Replayed',
 '!Set-Cookie' . "\n" . 'Idempotent-Replayed: true']
--- response_body eval
["created\n", "created\n"]
--- no_error_log
[error]



=== TEST 4: add_header Set-Cookie in the dedupe location itself applies to replays too
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        add_header Set-Cookie "route=d";
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/login;
    }
    location /login {
        add_header Set-Cookie "session=$http_x_user";
        return 200 "ok\n";
    }
--- request eval
["POST /d\nx=1", "POST /d\nx=1"]
--- more_headers eval
["X-Call-Id: ck-4\r\nX-User: alice", "X-Call-Id: ck-4\r\nX-User: bob"]
--- raw_response_headers_like eval
['Set-Cookie: session=alice\r\n(?:.*\r\n)*Set-Cookie: route=d\r\n',
 '\A(?![\s\S]*session=)[\s\S]*Idempotent-Replayed: true\r\n[\s\S]*Set-Cookie: route=d\r\n']
--- response_body eval
["ok\n", "ok\n"]
--- no_error_log
[error]



=== TEST 5: an upstream header named with a leading "~" (a stored trailer's mark): the answer is not stored, so no replay turns it into a trailer
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/odd;
    }
    location /odd {
        add_header "~X-Odd" 1;
        return 200 "odd\n";
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /d\nx=1", "POST /d\nx=1"]
--- more_headers eval
["X-Call-Id: tilde-1", "X-Call-Id: tilde-1"]
--- error_code eval
[200, 409]
--- raw_response_headers_like eval
['~X-Odd: 1\r\n', '\A(?![\s\S]*Idempotent-Replayed)']
--- no_error_log
[error]
