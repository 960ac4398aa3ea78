# Every kind of upstream behind "idem on": plain and https (TLS session
# reuse on and off), keepalive, hash, ip_hash, least_conn, random, grpc and
# a proxy_pass with a variable.  Each works as SPEC says; none may crash a
# worker (the balancer wrapper chains the whole peer contract).

use lib 't/lib';
use IdemTls;
use Test::Nginx::Socket 'no_plan';

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
