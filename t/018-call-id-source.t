# The call id from elsewhere than idem_call_id_header: idem_call_id_from
# (any nginx complex value: a provider's header, an argument, a map) and
# idem_call_id_json (a field of a JSON body), on webhook providers'
# deliveries written in each provider's published shape (t/data/webhooks/).
# The upstream is this nginx (/back shows what it received) or
# util/backend.pl, which counts the requests of each call id (/log/ID).

use Test::Nginx::Socket 'no_plan';
use FindBin ();

# No repeat_each(2): dedupe of fixed call ids (a second run's first
# delivery is a replay of the first run's) and backend counts per id.

no_long_string();
no_shuffle();
check_accum_error_log();

# a provider's sample delivery, as bytes
sub payload {
    my ($name) = @_;
    local (@ARGV, $/) = ("$FindBin::Bin/data/webhooks/$name");
    return scalar <>;
}

run_tests();

__DATA__

=== TEST 1: idem_call_id_from a Shopify header: the upstream gets it as its call id, flagged "variable"; a client's X-Call-Id does not override it
--- config
    location /hook {
        idem on;
        idem_call_id_from $http_x_shopify_event_id;
        proxy_set_header X-Src-Var $idem_call_id_source;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "id=$http_x_call_id source=$http_x_call_id_source var=$http_x_src_var";
    }
--- request eval
"POST /hook\n" . main::payload('shopify-orders-create.json')
--- more_headers
Content-Type: application/json
X-Shopify-Topic: orders/create
X-Shopify-Shop-Domain: ledger-notebooks.myshopify.com
X-Shopify-Hmac-Sha256: 6Jc7sZqD0v0mJ5bq1hGk3w9T0nLx2pYcVfR8aE4uIoM=
X-Shopify-Webhook-Id: 8d1c4e2a-71b5-4f0e-9c3d-2a6b5e4f1d0c
X-Shopify-Event-Id: 3f9a6c1e-2b4d-4e8f-a7c5-d1e0f2b3c4a5
X-Call-Id: chosen-by-the-client
--- response_headers
X-Call-Id: 3f9a6c1e-2b4d-4e8f-a7c5-d1e0f2b3c4a5
X-Call-Id-Source: variable
--- response_body
id=3f9a6c1e-2b4d-4e8f-a7c5-d1e0f2b3c4a5 source=variable var=variable
--- no_error_log
[error]



=== TEST 2: a GitHub push on a dedupe route keyed by X-GitHub-Delivery: the first delivery is forwarded once, the redelivery gets its answer replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /github {
        idem on;
        idem_call_id_from $http_x_github_delivery;
        idem_call_id_missing reject;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /github\n" . main::payload('github-push.json'),
 "POST /github\n" . main::payload('github-push.json'),
 "GET /log/0b5e2f7c-b1d3-11ef-8a41-9f2c6d0e4b17"]
--- more_headers eval
[("Content-Type: application/json\nX-GitHub-Event: push\nX-GitHub-Delivery: 0b5e2f7c-b1d3-11ef-8a41-9f2c6d0e4b17\nX-GitHub-Hook-ID: 498112233\nX-Hub-Signature-256: sha256=5c0f8e1a9b2d3c4e5f60718293a4b5c6d7e8f9011223344556677889900aabb\nUser-Agent: GitHub-Hookshot/7f3e2a1") x 2, ""]
--- error_code eval
[200, 200, 200]
--- response_headers eval
["!Idempotent-Replayed\nX-Call-Id: 0b5e2f7c-b1d3-11ef-8a41-9f2c6d0e4b17\nX-Call-Id-Source: variable",
 "Idempotent-Replayed: true\nX-Call-Id: 0b5e2f7c-b1d3-11ef-8a41-9f2c6d0e4b17\nX-Call-Id-Source: variable",
 ""]
--- response_body_like eval
['\An=1 attempt=1 [^\n]* method=POST body=\{"ref":"refs/heads/main"',
 '\An=1 attempt=1 [^\n]* method=POST body=\{"ref":"refs/heads/main"',
 '\An=1 [^\n]*\n\z']
--- no_error_log
[error]



=== TEST 3: an empty value is a missing id: reject names the value (a client's X-Call-Id is not taken instead), generate makes one, flagged "gateway"
--- config
    location /reject {
        idem on;
        idem_call_id_from $http_x_github_delivery;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /generate {
        idem on;
        idem_call_id_from $http_x_github_delivery;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "id=$http_x_call_id source=$http_x_call_id_source";
    }
--- request eval
["POST /reject\n{}", "POST /generate\n{}"]
--- more_headers
X-Call-Id: client-chose-this
--- error_code eval
[400, 200]
--- response_headers_like eval
["Content-Type: application/problem\\+json", "X-Call-Id: [0-9a-f-]{36}"]
--- response_body_like eval
['"type":"[^"]*missing-call-id","title":"[^"]*","status":400,"detail":"value \\\\"\$http_x_github_delivery\\\\": missing"',
 '\Aid=[0-9a-f]{8}-[0-9a-f-]{27} source=gateway\n\z']
--- no_error_log
[error]



=== TEST 4: an id from a variable is validated as a header's: a byte outside the charset is 400, naming the value
--- config
    location /hook {
        idem on;
        idem_call_id_from $arg_id;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "id=$http_x_call_id";
    }
--- request eval
["POST /hook?id=a%20b\n{}", "POST /hook?id=ok-4\n{}"]
--- error_code eval
[400, 200]
--- response_body_like eval
['"detail":"value \\\\"\$arg_id\\\\": byte 0x25 at offset 1 is not allowed"',
 '\Aid=ok-4\n\z']
--- no_error_log
[error]



=== TEST 5: a map that picks one of two headers (Shopify's event id, else its webhook id)
--- http_config
    map $http_x_shopify_event_id $shopify_id {
        ""      $http_x_shopify_webhook_id;
        default $http_x_shopify_event_id;
    }
--- config
    location /hook {
        idem on;
        idem_call_id_from $shopify_id;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "id=$http_x_call_id source=$http_x_call_id_source";
    }
--- request eval
["POST /hook\n" . main::payload('shopify-orders-create.json'),
 "POST /hook\n" . main::payload('shopify-orders-create.json')]
--- more_headers eval
["X-Shopify-Webhook-Id: 8d1c4e2a-71b5-4f0e-9c3d-2a6b5e4f1d0c",
 "X-Shopify-Webhook-Id: 8d1c4e2a-71b5-4f0e-9c3d-2a6b5e4f1d0c\nX-Shopify-Event-Id: 3f9a6c1e-2b4d-4e8f-a7c5-d1e0f2b3c4a5"]
--- response_body eval
["id=8d1c4e2a-71b5-4f0e-9c3d-2a6b5e4f1d0c source=variable\n",
 "id=3f9a6c1e-2b4d-4e8f-a7c5-d1e0f2b3c4a5 source=variable\n"]
--- no_error_log
[error]



=== TEST 6: the record of a call whose id came from a variable: the status endpoint answers by that id, source "variable"
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /hook {
        idem on;
        idem_record on;
        idem_call_id_from $http_x_shopify_event_id;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        return 200 "ok\n";
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /hook\n{}", "GET /calls/6a0d2c4e-8b1f-4d3a-9e5c-7f6b8a9c0d1e"]
--- more_headers eval
["X-Shopify-Event-Id: 6a0d2c4e-8b1f-4d3a-9e5c-7f6b8a9c0d1e", ""]
--- response_body_like eval
["\\Aok\\n\\z",
 '"call_id":"6a0d2c4e-8b1f-4d3a-9e5c-7f6b8a9c0d1e".*"state":"SUCCESS".*"source":"variable"']
--- no_error_log
[error]



=== TEST 7: the two sources are inherited as one: a location's idem_call_id_json replaces the server's idem_call_id_from, the other locations keep it
--- config
    idem_call_id_from $http_x_github_delivery;

    location /var {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /json {
        idem on;
        idem_call_id_json id;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "id=$http_x_call_id source=$http_x_call_id_source";
    }
--- request eval
["POST /var\n{\"id\":\"from-body-7\"}", "POST /json\n{\"id\":\"from-body-7\"}"]
--- more_headers
X-GitHub-Delivery: from-header-7
--- response_body eval
["id=from-header-7 source=variable\n", "id=from-body-7 source=body\n"]
--- no_error_log
[error]
