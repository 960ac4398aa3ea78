# Waiting duplicates (woken by the owner's final write) and the resend
# limit on the paths operators put them on: an https upstream{} with a
# keepalive pool, error_page (the 429 too-many-resends bypasses it, as
# every problem of the module does), a named location reached by
# error_page, and HTTP/2 clients; an owner that ends in another location
# than its claim's (error_page to a named location, X-Accel-Redirect)
# still wakes its waiters: its claim's route decides.  The owner is held
# at the backend (util/backend.pl /hold/1), behind nginx's own TLS
# server, until the block releases it; every step waits for the debug
# line that says it happened (t/lib/IdemWait.pm).

use lib 't/lib';
use IdemTls;
use IdemBg qw(bg done);
use IdemPaths qw(h2_url);
use IdemWait ();
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): fixed call ids and exact counts.

# a call over HTTP/2 (curl): its status and body
sub h2_post {
    my ($id, $path) = @_;
    my $url = h2_url($path);
    my $r = `curl -s -i --noproxy '*' --max-time 10 --http2-prior-knowledge -H 'X-Call-Id: $id' --data x=1 $url`;
    my ($status) = $r =~ m{^HTTP/2 (\d+)};
    my ($body) = $r =~ /\r\n\r\n(.*)\z/s;
    return ($status // 0, $body // '');
}

END { IdemBg::stop_all() }

our $Tls = <<'CONF';
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    upstream tls {
        server 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        keepalive 4;
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 ssl;
        ssl_certificate $TEST_NGINX_CERT_DIR/cert.pem;
        ssl_certificate_key $TEST_NGINX_CERT_DIR/key.pem;
        location / {
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        }
    }
CONF

add_block_preprocessor(sub {
    my $block = shift;
    if (!defined $block->http_config) {
        $block->set_value('http_config', $main::Tls);
    }
});

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: https upstream{} with keepalive: a duplicate waits, is woken by its owner's final write, and gets the owner's answer; the call ran once
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
main::bg('owner1', 'pw-1', '/pay', '--data', 'x=1');
IdemWait::owner_in('pw-1');
IdemWait::release_when('pw-1', \&IdemWait::watched, 1);
--- config
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location /pay {
        idem on;
        idem_call_id_missing reject;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_wait 20s;
        proxy_pass https://tls/hold/1;
    }
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: pw-1
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
--- response_body_like chomp
\An=1 
--- error_log
idem dedupe: "pw-1" woken by its owner's final write
--- no_error_log
[error]
[alert]



=== TEST 2: ... the owner's own client got the same answer, and the backend saw the call once, over the kept TLS connection
--- init
Test::More::like(main::done('owner1'), qr{\AHTTP/1\.1 200 .*\r\n\r\nn=1 }s,
                 "the owner's answer");
--- config
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request
GET /log/pw-1
--- response_body_like chomp
\An=1 [^\n]*\n\z
--- no_error_log
[error]



=== TEST 3: https upstream{} with keepalive: the first call goes over TLS, a resend within the rate is replayed, the next gets 429; nothing more forwarded
--- http_config eval
$main::Tls . '    idem_resend_limit_zone $binary_remote_addr zone=ip:1m rate=1r/m;'
--- config
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location /pay {
        idem on;
        idem_call_id_missing reject;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_resend_limit zone=ip;
        proxy_pass https://tls/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1", "POST /pay\nx=1", "GET /log/pr-3"]
--- more_headers eval
["X-Call-Id: pr-3", "X-Call-Id: pr-3", "X-Call-Id: pr-3", ""]
--- error_code eval
[200, 200, 429, 200]
--- response_headers_like eval
["", "Idempotent-Replayed: true", "Retry-After: \\d+", ""]
--- response_body_like eval
["\\An=1 ", "\\An=1 ", '\A\{"type":"urn:ngx-idem:problem:too-many-resends",',
 "\\An=1 [^\n]*\n\\z"]
--- no_error_log
[error]



=== TEST 4: the 429 bypasses error_page (a problem of the module): @err is not reached, nothing forwarded
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_resend_limit_zone $binary_remote_addr zone=ip:1m rate=1r/m;
--- config
    location /pay {
        idem on;
        idem_call_id_missing reject;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_resend_limit zone=ip;
        error_page 429 = @err;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location @err {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request eval
["POST /pay\nx=1", "POST /pay\nx=1", "POST /pay\nx=1", "GET /log/pr-4"]
--- more_headers eval
["X-Call-Id: pr-4", "X-Call-Id: pr-4", "X-Call-Id: pr-4", ""]
--- error_code eval
[200, 200, 429, 200]
--- response_headers_like eval
["", "Idempotent-Replayed: true",
 "Content-Type: application/problem\\+json", ""]
--- response_body_like eval
["\\An=1 ", "\\An=1 ", '\A\{"type":"urn:ngx-idem:problem:too-many-resends",',
 "\\An=1 [^\n]*\n\\z"]
--- no_error_log
[error]



=== TEST 5: HTTP/2 clients: the first call runs, a resend is replayed, the next gets 429 problem+json; the backend saw it once
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_resend_limit_zone $binary_remote_addr zone=ip:1m rate=1r/m;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 http2;
        location /pay {
            idem on;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_resend_limit zone=ip;
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
        }
    }
--- init
my @want = ([200, qr/\An=1 /], [200, qr/\An=1 /],
            [429, qr/\A\{"type":"urn:ngx-idem:problem:too-many-resends",/]);
for my $i (0 .. $#want) {
    my ($status, $body) = main::h2_post('pr-5', '/pay');
    Test::More::is($status, $want[$i][0], "HTTP/2 call $i: $want[$i][0]");
    Test::More::like($body, $want[$i][1], "HTTP/2 call $i: its body");
}
--- config
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request
GET /log/pr-5
--- response_body_like chomp
\An=1 [^\n]*\n\z
--- no_error_log
[error]



=== TEST 6: a named location reached by error_page: a duplicate waits there (one resend at a time, concurrent=1) while the next resend gets 429; the owner released, the waiting duplicate is woken with its answer; the call ran once
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_resend_limit_zone $binary_remote_addr zone=ip:1m;
--- init
main::bg('owner6', 'pn-6', '/pay', '--data', 'x=1');
IdemWait::owner_in('pn-6');
main::bg('dup6', 'pn-6', '/pay', '--data', 'x=1');
IdemWait::parked_ok('pn-6', 1);
main::bg('more6', 'pn-6', '/pay', '--data', 'x=1');
my $more = main::done('more6');
Test::More::like($more, qr{\AHTTP/1\.1 429 }, 'the next resend: 429');
Test::More::like($more, qr{"type":"urn:ngx-idem:problem:too-many-resends"},
                 '... too-many-resends');
IdemWait::release('pn-6');
Test::More::like(main::done('owner6'), qr{\AHTTP/1\.1 200 .*\r\n\r\nn=1 }s,
                 "the owner's answer");
my $dup = main::done('dup6');
Test::More::like($dup, qr{\AHTTP/1\.1 200 }, 'the waiting duplicate: 200');
Test::More::like($dup, qr{\r\nIdempotent-Replayed: true\r\n},
                 "... the owner's answer, replayed");
--- config
    location /pay {
        error_page 418 = @pay;
        return 418;
    }
    location @pay {
        idem on;
        idem_call_id_missing reject;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_wait 20s;
        idem_resend_limit zone=ip concurrent=1;
        rewrite ^ /hold/1 break;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request
GET /log/pn-6
--- response_body_like chomp
\An=1 [^\n]*\n\z
--- error_log
idem dedupe: "pn-6" woken by its owner's final write
--- no_error_log
[error]



=== TEST 7: the owner ends in a named location reached by error_page (its upstream's 502, intercepted): its final write still wakes the duplicate waiting on its claim's route, with the fallback's answer
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- init
main::bg('owner7', 'pe-7', '/w', '--data', 'x=1');
IdemWait::owner_in('pe-7');
IdemWait::release_when('pe-7', \&IdemWait::watched, 1);
--- config
    location /w {
        idem on;
        idem_call_id_missing reject;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_wait 20s;
        proxy_intercept_errors on;
        error_page 502 = @fb;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1/status/502/1;
    }
    location @fb {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request
POST /w
x=1
--- more_headers
X-Call-Id: pe-7
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\n\z
--- error_log
idem dedupe: "pe-7" woken by its owner's final write
--- no_error_log
[error]



=== TEST 8: ... the owner's own client got the fallback's answer; its upstream ran once, the fallback once
--- init
Test::More::like(main::done('owner7'), qr{\AHTTP/1\.1 200 .*\r\n\r\nn=1 [^\n]*\nn=2 }s,
                 "the owner's answer: the fallback's");
--- config
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request
GET /log/pe-7
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\n\z
--- no_error_log
[error]



=== TEST 9: the owner ends in the location its upstream's X-Accel-Redirect names: its final write still wakes the duplicate waiting on its claim's route, with that location's answer
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- init
main::bg('owner9', 'px-9', '/x', '--data', 'x=1');
IdemWait::owner_in('px-9');
IdemWait::release_when('px-9', \&IdemWait::watched, 1);
--- config
    location /x {
        idem on;
        idem_call_id_missing reject;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_wait 20s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/accel;
    }
    location /accel {
        add_header X-Accel-Redirect /moved;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/hold/1;
    }
    location /moved {
        internal;
        return 200 "moved\n";
    }
--- request
POST /x
x=1
--- more_headers
X-Call-Id: px-9
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
--- response_body
moved
--- error_log
idem dedupe: "px-9" woken by its owner's final write
--- no_error_log
[error]



=== TEST 10: ... the owner's own client got the redirect's answer; the upstream ran once
--- init
Test::More::like(main::done('owner9'), qr{\AHTTP/1\.1 200 .*\r\n\r\nmoved\n\z}s,
                 "the owner's answer: the redirect's");
--- config
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- request
GET /log/px-9
--- response_body_like chomp
\An=1 [^\n]*\n\z
--- no_error_log
[error]
