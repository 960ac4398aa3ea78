# Attempts over the balancers nginx ships: with every one of them, an
# idempotent call that has more attempts than the upstream has servers goes
# round the upstream again (t/050-retry.t TEST 13 does it for round robin).
# The module asks the balancer for a new round through the upstream's
# peer.init, the interface nginx itself uses, not by writing into round
# robin's per-request data (ngx_http_idem_round.c): these blocks fail, on
# any nginx version, if that stops working for a balancer, and nginx
# 1.29.7 and later put keepalive around every upstream{}.  The X-Call-Id of
# the answer shows that the call's own state survived the rounds.
#
# Two servers (the same backend twice, max_fails=0 so that no failure
# takes one out), four attempts, the first three answered 503.

use lib 't/lib';
use IdemDns;
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): util/backend.pl counts the attempts of each call id; the
# blocks expect the log of a first run of their fixed ids.

no_long_string();
run_tests();

__DATA__

=== TEST 1: round robin behind keepalive (the default of nginx 1.29.7 and later)
--- http_config
    upstream two {
        keepalive 4;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass http://two/status/503/3;
    }
--- request
GET /t
--- more_headers
X-Call-Id: b1
--- response_headers
X-Call-Id: b1
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\nn=3 [^\n]*\nn=4 attempt=4 [^\n]*\n\z
--- no_error_log
[error]


=== TEST 2: hash
--- http_config
    upstream two {
        hash $request_uri;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass http://two/status/503/3;
    }
--- request
GET /t
--- more_headers
X-Call-Id: b2
--- response_headers
X-Call-Id: b2
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\nn=3 [^\n]*\nn=4 attempt=4 [^\n]*\n\z
--- no_error_log
[error]


=== TEST 3: hash consistent
--- http_config
    upstream two {
        hash $request_uri consistent;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass http://two/status/503/3;
    }
--- request
GET /t
--- more_headers
X-Call-Id: b3
--- response_headers
X-Call-Id: b3
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\nn=3 [^\n]*\nn=4 attempt=4 [^\n]*\n\z
--- no_error_log
[error]


=== TEST 4: ip_hash
--- http_config
    upstream two {
        ip_hash;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass http://two/status/503/3;
    }
--- request
GET /t
--- more_headers
X-Call-Id: b4
--- response_headers
X-Call-Id: b4
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\nn=3 [^\n]*\nn=4 attempt=4 [^\n]*\n\z
--- no_error_log
[error]


=== TEST 5: least_conn
--- http_config
    upstream two {
        least_conn;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass http://two/status/503/3;
    }
--- request
GET /t
--- more_headers
X-Call-Id: b5
--- response_headers
X-Call-Id: b5
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\nn=3 [^\n]*\nn=4 attempt=4 [^\n]*\n\z
--- no_error_log
[error]


=== TEST 6: random
--- http_config
    upstream two {
        random;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass http://two/status/503/3;
    }
--- request
GET /t
--- more_headers
X-Call-Id: b6
--- response_headers
X-Call-Id: b6
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\nn=3 [^\n]*\nn=4 attempt=4 [^\n]*\n\z
--- no_error_log
[error]


=== TEST 7: random two least_conn
--- http_config
    upstream two {
        random two least_conn;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass http://two/status/503/3;
    }
--- request
GET /t
--- more_headers
X-Call-Id: b7
--- response_headers
X-Call-Id: b7
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\nn=3 [^\n]*\nn=4 attempt=4 [^\n]*\n\z
--- no_error_log
[error]


=== TEST 8: least_conn behind keepalive
--- http_config
    upstream two {
        least_conn;
        keepalive 4;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass http://two/status/503/3;
    }
--- request
GET /t
--- more_headers
X-Call-Id: b8
--- response_headers
X-Call-Id: b8
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\nn=3 [^\n]*\nn=4 attempt=4 [^\n]*\n\z
--- no_error_log
[error]


=== TEST 9: zone (shared memory)
--- http_config
    upstream two {
        zone b 64k;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass http://two/status/503/3;
    }
--- request
GET /t
--- more_headers
X-Call-Id: b9
--- response_headers
X-Call-Id: b9
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\nn=3 [^\n]*\nn=4 attempt=4 [^\n]*\n\z
--- no_error_log
[error]


=== TEST 10: hash in a zone, behind keepalive
--- http_config
    upstream two {
        zone b 64k;
        hash $request_uri;
        keepalive 4;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass http://two/status/503/3;
    }
--- request
GET /t
--- more_headers
X-Call-Id: b10
--- response_headers
X-Call-Id: b10
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\nn=3 [^\n]*\nn=4 attempt=4 [^\n]*\n\z
--- no_error_log
[error]


=== TEST 11: zone + servers resolved at run time (IdemDns answers 127.0.0.1)
--- skip_nginx: 5: < 1.27.3
--- http_config
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT ipv6=off;
    upstream two {
        zone b 64k;
        server one.idem.test:$TEST_NGINX_BACKEND_PORT resolve max_fails=0;
        server two.idem.test:$TEST_NGINX_BACKEND_PORT resolve max_fails=0;
    }
--- config
    location /warm {
        echo_sleep 0.3;
        echo warm;
    }
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass http://two/status/503/3;
    }
--- request eval
["GET /warm", "GET /t"]
--- more_headers eval
["", "X-Call-Id: b11"]
--- response_body_like eval
["warm", "\\An=1 [^\\n]*\\nn=2 [^\\n]*\\nn=3 [^\\n]*\\nn=4 attempt=4 [^\\n]*\\n\\z"]
--- no_error_log
[error]



=== TEST 12: least_time (nginx 1.31)
--- skip_nginx: 4: < 1.31.0
--- http_config
    upstream two {
        least_time header;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass http://two/status/503/3;
    }
--- request
GET /t
--- more_headers
X-Call-Id: b12
--- response_headers
X-Call-Id: b12
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\nn=3 [^\n]*\nn=4 attempt=4 [^\n]*\n\z
--- no_error_log
[error]



=== TEST 13: sticky (nginx 1.29.6 and later)
--- skip_nginx: 4: < 1.29.6
--- http_config
    upstream two {
        zone b 64k;
        sticky cookie srv_id;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
        server 127.0.0.1:$TEST_NGINX_BACKEND_PORT max_fails=0;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 4 backoff=5ms;
        proxy_pass http://two/status/503/3;
    }
--- request
GET /t
--- more_headers
X-Call-Id: b13
--- response_headers
X-Call-Id: b13
--- response_body_like chomp
\An=1 [^\n]*\nn=2 [^\n]*\nn=3 [^\n]*\nn=4 attempt=4 [^\n]*\n\z
--- no_error_log
[error]
