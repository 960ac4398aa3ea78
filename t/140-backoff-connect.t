# The connect after a backoff goes through nginx's own
# ngx_event_connect_peer(): it honours proxy_bind (transparent too) and
# proxy_socket_keepalive, and gives a cached keepalive connection up for a
# fresh one, as the first attempt's connect would.  t/141-backoff-poll.t:
# the same with an event method that has no ngx_add_conn.

use Test::Nginx::Socket 'no_plan';

repeat_each(2);

no_long_string();
run_tests();

__DATA__

=== TEST 2: a retry on a keepalive upstream, its cached connection given up
--- http_config
    upstream ka {
        server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
        keepalive 4;
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=20ms on=http_503;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_connect_timeout 2s;
        proxy_pass http://ka/back;
    }
    location /back {
        if ($http_x_call_attempt = 1) {
            return 503 "busy\n";
        }
        return 200 "attempt $http_x_call_attempt\n";
    }
--- request eval
["GET /t", "GET /t"]
--- more_headers
X-Call-Id: poll-2
--- timeout: 5
--- response_body eval
["attempt 2\n", "attempt 2\n"]
--- no_error_log
[error]
[alert]
[crit]



=== TEST 3: proxy_bind applies to the attempt after a backoff, as to the first
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        location / {
            if ($http_x_call_attempt = 1) {
                return 503 "from $remote_addr\n";
            }
            return 200 "from $remote_addr, attempt $http_x_call_attempt\n";
        }
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=20ms;
        proxy_bind 127.0.0.2;
        proxy_connect_timeout 2s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request
GET /t
--- more_headers
X-Call-Id: poll-3
--- timeout: 5
--- response_body
from 127.0.0.2, attempt 2
--- no_error_log
[error]
[alert]
[crit]



=== TEST 4: proxy_bind transparent, proxy_socket_keepalive: the retried connect works as the first
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        location / {
            if ($http_x_call_attempt = 1) {
                return 503 "from $remote_addr\n";
            }
            return 200 "from $remote_addr, attempt $http_x_call_attempt\n";
        }
    }
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=20ms;
        proxy_bind 127.0.0.3 transparent;
        proxy_socket_keepalive on;
        proxy_connect_timeout 2s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- request
GET /t
--- more_headers
X-Call-Id: poll-4
--- timeout: 5
--- response_body
from 127.0.0.3, attempt 2
--- no_error_log
[error]
[alert]
[crit]



=== TEST 5: proxy_bind transparent to an address not of this host: every attempt binds it
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 2 backoff=10ms;
        proxy_bind 192.0.2.10 transparent;
        proxy_connect_timeout 300ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- request
GET /t
--- more_headers
X-Call-Id: bind-5
--- timeout: 5
--- error_code: 504
--- error_log
upstream timed out
--- no_error_log
[alert]
[crit]
