# Every kind of upstream behind "idem on": plain and https (TLS session
# reuse on and off), keepalive, hash, ip_hash, least_conn, random, grpc and
# a proxy_pass with a variable.  Each works as SPEC says; none may crash a
# worker (the balancer wrapper chains the whole peer contract).

use lib 't/lib';
use IdemTls;
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): the worker keeps the upstream's TLS session (TEST 1
# expects a new one first) and util/backend.pl counts attempts per fixed id.

no_long_string();
run_tests();

__DATA__

=== TEST 1: https upstream, TLS sessions reused (the default): no crash
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 ssl;
        ssl_certificate $TEST_NGINX_CERT_DIR/cert.pem;
        ssl_certificate_key $TEST_NGINX_CERT_DIR/key.pem;
        location / {
            return 200 "tls $http_x_call_id $http_x_call_attempt $ssl_session_reused\n";
        }
    }
--- config
    location /t {
        idem on;
        proxy_pass https://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request eval
["GET /t", "GET /t", "GET /t"]
--- more_headers
X-Call-Id: tls-1
--- response_body eval
["tls tls-1 1 .\n", "tls tls-1 1 r\n", "tls tls-1 1 r\n"]
--- no_error_log
[error]
[alert]
signal



=== TEST 2: https upstream, proxy_ssl_session_reuse off
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 ssl;
        ssl_certificate $TEST_NGINX_CERT_DIR/cert.pem;
        ssl_certificate_key $TEST_NGINX_CERT_DIR/key.pem;
        location / {
            return 200 "tls $http_x_call_id $http_x_call_attempt $ssl_session_reused\n";
        }
    }
--- config
    location /t {
        idem on;
        proxy_ssl_session_reuse off;
        proxy_pass https://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request eval
["GET /t", "GET /t"]
--- more_headers
X-Call-Id: tls-2
--- response_body eval
["tls tls-2 1 .\n", "tls tls-2 1 .\n"]
--- no_error_log
[error]
[alert]
signal



=== TEST 3: idempotent https: a failing TLS server, then a good one
--- http_config
    upstream tls {
        server 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        server 127.0.0.1:$TEST_NGINX_RAND_PORT_2;
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 ssl;
        ssl_certificate $TEST_NGINX_CERT_DIR/cert.pem;
        ssl_certificate_key $TEST_NGINX_CERT_DIR/key.pem;
        location / {
            return 503 "busy\n";
        }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2 ssl;
        ssl_certificate $TEST_NGINX_CERT_DIR/cert.pem;
        ssl_certificate_key $TEST_NGINX_CERT_DIR/key.pem;
        location / {
            return 200 "tls $http_x_call_id $http_x_call_attempt\n";
        }
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass https://tls;
    }
--- request eval
["POST /t\nx=1", "POST /t\nx=2", "POST /t\nx=3"]
--- more_headers
X-Call-Id: tls-3
--- response_body_like eval
["^tls tls-3 [12]\n\$", "^tls tls-3 [12]\n\$", "^tls tls-3 [12]\n\$"]
--- no_error_log
[error]
[alert]
signal



=== TEST 4: round robin (two servers): idem on, idempotent retries, records
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    upstream kind {
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /on {
        idem on;
        proxy_pass http://kind/ok;
    }
    location /retry {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        proxy_pass http://kind/status/503/1;
    }
    location /rec {
        idem on;
        idem_record on;
        proxy_pass http://kind/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /on", "POST /retry\nx=1", "POST /rec\nx=2", "GET /calls/rr-rec"]
--- more_headers eval
["X-Call-Id: rr-on", "X-Call-Id: rr-retry", "X-Call-Id: rr-rec", ""]
--- error_code eval
[200, 200, 200, 200]
--- response_body_like eval
['\An=1 attempt=1 [^\n]*method=GET body=\n\z',
 '\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*body=x=1\n\z',
 '\An=1 attempt=1 [^\n]*body=x=2\n\z',
 '"state":"SUCCESS",.*"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"ok","sent":true,"status":200,[^}]*\}\]\}$']
--- no_error_log
[error]
[alert]
signal



=== TEST 5: keepalive: idem on, idempotent retries, records
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    upstream kind {
        keepalive 4;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location /on {
        idem on;
        proxy_pass http://kind/ok;
    }
    location /retry {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        proxy_pass http://kind/status/503/1;
    }
    location /rec {
        idem on;
        idem_record on;
        proxy_pass http://kind/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /on", "POST /retry\nx=1", "POST /rec\nx=2", "GET /calls/ka-rec"]
--- more_headers eval
["X-Call-Id: ka-on", "X-Call-Id: ka-retry", "X-Call-Id: ka-rec", ""]
--- error_code eval
[200, 200, 200, 200]
--- response_body_like eval
['\An=1 attempt=1 [^\n]*method=GET body=\n\z',
 '\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*body=x=1\n\z',
 '\An=1 attempt=1 [^\n]*body=x=2\n\z',
 '"state":"SUCCESS",.*"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"ok","sent":true,"status":200,[^}]*\}\]\}$']
--- no_error_log
[error]
[alert]
signal



=== TEST 6: hash: idem on, idempotent retries, records
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    upstream kind {
        hash $request_uri;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /on {
        idem on;
        proxy_pass http://kind/ok;
    }
    location /retry {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        proxy_pass http://kind/status/503/1;
    }
    location /rec {
        idem on;
        idem_record on;
        proxy_pass http://kind/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /on", "POST /retry\nx=1", "POST /rec\nx=2", "GET /calls/hash-rec"]
--- more_headers eval
["X-Call-Id: hash-on", "X-Call-Id: hash-retry", "X-Call-Id: hash-rec", ""]
--- error_code eval
[200, 200, 200, 200]
--- response_body_like eval
['\An=1 attempt=1 [^\n]*method=GET body=\n\z',
 '\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*body=x=1\n\z',
 '\An=1 attempt=1 [^\n]*body=x=2\n\z',
 '"state":"SUCCESS",.*"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"ok","sent":true,"status":200,[^}]*\}\]\}$']
--- no_error_log
[error]
[alert]
signal



=== TEST 7: hash consistent: idem on, idempotent retries, records
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    upstream kind {
        hash $request_uri consistent;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /on {
        idem on;
        proxy_pass http://kind/ok;
    }
    location /retry {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        proxy_pass http://kind/status/503/1;
    }
    location /rec {
        idem on;
        idem_record on;
        proxy_pass http://kind/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /on", "POST /retry\nx=1", "POST /rec\nx=2", "GET /calls/chash-rec"]
--- more_headers eval
["X-Call-Id: chash-on", "X-Call-Id: chash-retry", "X-Call-Id: chash-rec", ""]
--- error_code eval
[200, 200, 200, 200]
--- response_body_like eval
['\An=1 attempt=1 [^\n]*method=GET body=\n\z',
 '\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*body=x=1\n\z',
 '\An=1 attempt=1 [^\n]*body=x=2\n\z',
 '"state":"SUCCESS",.*"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"ok","sent":true,"status":200,[^}]*\}\]\}$']
--- no_error_log
[error]
[alert]
signal



=== TEST 8: ip_hash: idem on, idempotent retries, records
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    upstream kind {
        ip_hash;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /on {
        idem on;
        proxy_pass http://kind/ok;
    }
    location /retry {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        proxy_pass http://kind/status/503/1;
    }
    location /rec {
        idem on;
        idem_record on;
        proxy_pass http://kind/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /on", "POST /retry\nx=1", "POST /rec\nx=2", "GET /calls/iph-rec"]
--- more_headers eval
["X-Call-Id: iph-on", "X-Call-Id: iph-retry", "X-Call-Id: iph-rec", ""]
--- error_code eval
[200, 200, 200, 200]
--- response_body_like eval
['\An=1 attempt=1 [^\n]*method=GET body=\n\z',
 '\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*body=x=1\n\z',
 '\An=1 attempt=1 [^\n]*body=x=2\n\z',
 '"state":"SUCCESS",.*"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"ok","sent":true,"status":200,[^}]*\}\]\}$']
--- no_error_log
[error]
[alert]
signal



=== TEST 9: least_conn: idem on, idempotent retries, records
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    upstream kind {
        least_conn;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /on {
        idem on;
        proxy_pass http://kind/ok;
    }
    location /retry {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        proxy_pass http://kind/status/503/1;
    }
    location /rec {
        idem on;
        idem_record on;
        proxy_pass http://kind/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /on", "POST /retry\nx=1", "POST /rec\nx=2", "GET /calls/lc-rec"]
--- more_headers eval
["X-Call-Id: lc-on", "X-Call-Id: lc-retry", "X-Call-Id: lc-rec", ""]
--- error_code eval
[200, 200, 200, 200]
--- response_body_like eval
['\An=1 attempt=1 [^\n]*method=GET body=\n\z',
 '\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*body=x=1\n\z',
 '\An=1 attempt=1 [^\n]*body=x=2\n\z',
 '"state":"SUCCESS",.*"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"ok","sent":true,"status":200,[^}]*\}\]\}$']
--- no_error_log
[error]
[alert]
signal



=== TEST 10: random: idem on, idempotent retries, records
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    upstream kind {
        random;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /on {
        idem on;
        proxy_pass http://kind/ok;
    }
    location /retry {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        proxy_pass http://kind/status/503/1;
    }
    location /rec {
        idem on;
        idem_record on;
        proxy_pass http://kind/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /on", "POST /retry\nx=1", "POST /rec\nx=2", "GET /calls/rnd-rec"]
--- more_headers eval
["X-Call-Id: rnd-on", "X-Call-Id: rnd-retry", "X-Call-Id: rnd-rec", ""]
--- error_code eval
[200, 200, 200, 200]
--- response_body_like eval
['\An=1 attempt=1 [^\n]*method=GET body=\n\z',
 '\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*body=x=1\n\z',
 '\An=1 attempt=1 [^\n]*body=x=2\n\z',
 '"state":"SUCCESS",.*"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"ok","sent":true,"status":200,[^}]*\}\]\}$']
--- no_error_log
[error]
[alert]
signal



=== TEST 11: random two least_conn: idem on, idempotent retries, records
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    upstream kind {
        random two least_conn;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /on {
        idem on;
        proxy_pass http://kind/ok;
    }
    location /retry {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        proxy_pass http://kind/status/503/1;
    }
    location /rec {
        idem on;
        idem_record on;
        proxy_pass http://kind/ok;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /on", "POST /retry\nx=1", "POST /rec\nx=2", "GET /calls/rnd2-rec"]
--- more_headers eval
["X-Call-Id: rnd2-on", "X-Call-Id: rnd2-retry", "X-Call-Id: rnd2-rec", ""]
--- error_code eval
[200, 200, 200, 200]
--- response_body_like eval
['\An=1 attempt=1 [^\n]*method=GET body=\n\z',
 '\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*body=x=1\n\z',
 '\An=1 attempt=1 [^\n]*body=x=2\n\z',
 '"state":"SUCCESS",.*"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"ok","sent":true,"status":200,[^}]*\}\]\}$']
--- no_error_log
[error]
[alert]
signal



=== TEST 12: grpc_pass to an h2c server: idem on, idempotent retries, records
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    upstream h2 {
        server 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            if ($http_x_call_attempt = 1) {
                return 503;
            }
            add_header X-Seen "$http_x_call_id $http_x_call_attempt";
            return 200;
        }
        location /ok {
            add_header X-Seen "$http_x_call_id $http_x_call_attempt";
            return 200;
        }
    }
--- config
    location /on {
        idem on;
        grpc_pass grpc://h2;
    }
    location /retry {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        grpc_pass grpc://h2;
    }
    location /rec {
        idem on;
        idem_record on;
        grpc_pass grpc://h2;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /on", "POST /retry\nx=1", "POST /rec\nx=2", "GET /calls/grpc-rec"]
--- more_headers eval
["X-Call-Id: grpc-on", "X-Call-Id: grpc-retry", "X-Call-Id: grpc-rec", ""]
--- error_code eval
[503, 200, 503, 200]
--- response_headers eval
["!X-Seen", "X-Seen: grpc-retry 2", "!X-Seen", ""]
--- response_body_like eval
["", "", "", '"state":"FAILED",.*"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"http_503","sent":true,"status":503,[^}]*\}\]\}$']
--- no_error_log
[error]
[alert]
signal



=== TEST 13: proxy_pass $variable naming an upstream{}: wrapped, retried, recorded
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    upstream kind {
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- config
    location /named {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        idem_record on;
        set $up kind;
        proxy_pass http://$up/status/503/1;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["POST /named\nx=1", "GET /calls/var-named"]
--- more_headers eval
["X-Call-Id: var-named", ""]
--- error_code eval
[200, 200]
--- response_body_like eval
['\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*body=x=1\n\z',
 '"state":"SUCCESS",.*"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"http_503"[^}]*\},\{"execution":1,"n":2,[^}]*"outcome":"ok"']
--- no_error_log
[error]
[alert]
signal



=== TEST 14: proxy_pass $variable naming host:port: nginx's own policy, logged
--- config
    location /plain {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        set $up 127.0.0.1:$TEST_NGINX_BACKEND_PORT;
        proxy_pass http://$up/status/503/1;
    }
--- request
POST /plain
x=2
--- more_headers
X-Call-Id: var-plain
--- error_code: 503
--- response_body
failing 1
--- error_log
its calls get nginx's own retry policy
--- no_error_log
[alert]
signal



=== TEST 15: https upstream{} with keepalive: idempotent retries, records, sessions reused
--- http_config
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
            if ($http_x_call_attempt = 1) {
                return 503 "busy\n";
            }
            return 200 "tls $http_x_call_id $http_x_call_attempt\n";
        }
    }
--- config
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location /retry {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=5ms;
        idem_record on;
        proxy_pass https://tls;
    }
    location /calls/ {
        idem_status;
    }
--- request eval
["POST /retry\nx=1", "POST /retry\nx=1", "GET /calls/tls-ka"]
--- more_headers eval
["X-Call-Id: tls-ka", "X-Call-Id: tls-ka", ""]
--- error_code eval
[200, 200, 200]
--- response_body_like eval
["\\Atls tls-ka 2\n\\z", "\\Atls tls-ka 2\n\\z", '"state":"SUCCESS",.*"executions":2,']
--- no_error_log
[error]
[alert]
signal
