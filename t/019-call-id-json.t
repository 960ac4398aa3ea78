# idem_call_id_json: the call id from a field of a JSON body, on webhook
# providers' deliveries written in each provider's published shape
# (t/data/webhooks/): Stripe, Slack, SNS, Shopify, an SQS batch.  The
# upstream is util/backend.pl, which answers with the body it received
# and counts the requests of each call id (/log/ID); /back, on this nginx,
# shows the headers it received.

use Test::Nginx::Socket 'no_plan';
use FindBin ();
use Digest::SHA ();

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

# the backend's answer to a first request of its id with this body
sub forwarded {
    my ($body) = @_;
    return '\An=1 attempt=1 [^\n]* method=POST body=' . quotemeta($body)
           . '\n\z';
}

# a body in three chunks
sub chunked {
    my ($body) = @_;
    my $third = int(length($body) / 3) + 1;
    my $out = '';
    for (my $i = 0; $i < length $body; $i += $third) {
        my $piece = substr($body, $i, $third);
        $out .= sprintf("%x\r\n%s\r\n", length $piece, $piece);
    }
    return $out . "0\r\n\r\n";
}

run_tests();

__DATA__

=== TEST 1: a Stripe charge.succeeded event: the first delivery is forwarded once, byte for byte; its resend is replayed; a resend re-serialised (pending_webhooks changed) is 422
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /stripe {
        idem on;
        idem_call_id_json id;
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
["POST /stripe\n" . main::payload('stripe-charge-succeeded.json'),
 "POST /stripe\n" . main::payload('stripe-charge-succeeded.json'),
 "POST /stripe\n" . main::payload('stripe-charge-succeeded-resend.json'),
 "GET /log/evt_3QkT7uHw2mVb9ZxA1c0dEf4G"]
--- more_headers eval
[("Content-Type: application/json; charset=utf-8\nStripe-Signature: t=1733300001,v1=9f1e0c7b5a3d2e4f6a8b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f\nUser-Agent: Stripe/1.0 (+https://stripe.com/docs/webhooks)") x 3, ""]
--- error_code eval
[200, 200, 422, 200]
--- response_headers eval
["!Idempotent-Replayed\nX-Call-Id: evt_3QkT7uHw2mVb9ZxA1c0dEf4G\nX-Call-Id-Source: body",
 "Idempotent-Replayed: true\nX-Call-Id: evt_3QkT7uHw2mVb9ZxA1c0dEf4G\nX-Call-Id-Source: body",
 "Content-Type: application/problem+json\nX-Call-Id: evt_3QkT7uHw2mVb9ZxA1c0dEf4G",
 ""]
--- response_body_like eval
[main::forwarded(main::payload('stripe-charge-succeeded.json')),
 main::forwarded(main::payload('stripe-charge-succeeded.json')),
 '"type":"[^"]*payload-mismatch"',
 '\An=1 [^\n]*\n\z']
--- no_error_log
[error]



=== TEST 2: the same resend on a route whose fingerprint leaves the body out (idem_dedupe_fingerprint method uri): replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /stripe {
        idem on;
        idem_call_id_json id;
        idem_call_id_missing reject;
        idem_dedupe on;
        idem_dedupe_scope off;
        idem_dedupe_fingerprint method uri;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /stripe\n" . main::payload('stripe-charge-succeeded.json'),
 "POST /stripe\n" . main::payload('stripe-charge-succeeded-resend.json'),
 "PUT /stripe\n" . main::payload('stripe-charge-succeeded.json'),
 "GET /log/evt_3QkT7uHw2mVb9ZxA1c0dEf4G"]
--- error_code eval
[200, 200, 422, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true", "", ""]
--- response_body_like eval
['\An=\d+ attempt=1 [^\n]*"pending_webhooks":1,',
 '\An=\d+ attempt=1 [^\n]*"pending_webhooks":1,',
 '"type":"[^"]*payload-mismatch"',
 '"pending_webhooks":1,[^\n]*\n\z']
--- no_error_log
[error]



=== TEST 3: a Slack event_callback keyed by event_id: its retry (X-Slack-Retry-Num) is replayed; a url_verification, which has no event_id, gets a generated id and reaches the app each time (and nginx -t does not warn about a dedupe route that generates ids: the sender never reads one back)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /slack {
        idem on;
        idem_call_id_json event_id;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /slack\n" . main::payload('slack-event-callback.json'),
 "POST /slack\n" . main::payload('slack-event-callback.json'),
 "POST /slack\n" . main::payload('slack-url-verification.json'),
 "POST /slack\n" . main::payload('slack-url-verification.json')]
--- more_headers eval
["Content-Type: application/json\nX-Slack-Request-Timestamp: 1733302212\nX-Slack-Signature: v0=3d5e7f9a1b2c4d6e8f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a6b8c0d2e",
 "Content-Type: application/json\nX-Slack-Request-Timestamp: 1733302215\nX-Slack-Signature: v0=7a9c1e3f5b7d9f1a3c5e7a9b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f\nX-Slack-Retry-Num: 1\nX-Slack-Retry-Reason: http_timeout",
 "Content-Type: application/json", "Content-Type: application/json"]
--- error_code eval
[200, 200, 200, 200]
--- response_headers_like eval
["X-Call-Id: Ev08KJ3N5Q2R", "Idempotent-Replayed: true", "X-Call-Id: [0-9a-f-]{36}", "X-Call-Id: [0-9a-f-]{36}"]
--- response_body_like eval
[main::forwarded(main::payload('slack-event-callback.json')),
 main::forwarded(main::payload('slack-event-callback.json')),
 main::forwarded(main::payload('slack-url-verification.json')),
 main::forwarded(main::payload('slack-url-verification.json'))]
--- no_error_log
[error]
"idem_dedupe" is on where missing call ids are generated



=== TEST 4: an SNS Notification posted as text/plain: its MessageId is the id whatever the Content-Type
--- config
    location /sns {
        idem on;
        idem_call_id_json MessageId;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "id=$http_x_call_id source=$http_x_call_id_source type=$http_content_type";
    }
--- request eval
"POST /sns\n" . main::payload('sns-notification.json')
--- more_headers
Content-Type: text/plain; charset=UTF-8
x-amz-sns-message-type: Notification
x-amz-sns-message-id: 5b7c1e2d-9a3f-5e4b-8c6d-0f1a2b3c4d5e
x-amz-sns-topic-arn: arn:aws:sns:eu-west-1:210987654321:orders-paid
User-Agent: Amazon Simple Notification Service Agent
--- response_body
id=5b7c1e2d-9a3f-5e4b-8c6d-0f1a2b3c4d5e source=body type=text/plain; charset=UTF-8
--- no_error_log
[error]



=== TEST 5: a numeric id (a Shopify order's "id"), a path into an array (an SQS batch's Records[0].messageId), a nested path (Stripe's data.object.id)
--- config
    location /shopify {
        idem on;
        idem_call_id_json id;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /sqs {
        idem on;
        idem_call_id_json Records[0].messageId;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /charge {
        idem on;
        idem_call_id_json data.object.id;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "id=$http_x_call_id";
    }
--- request eval
["POST /shopify\n" . main::payload('shopify-orders-create.json'),
 "POST /sqs\n" . main::payload('sqs-records.json'),
 "POST /charge\n" . main::payload('stripe-charge-succeeded.json')]
--- response_body eval
["id=5912873460213\n", "id=2e1a7c3b-5d4f-4e6a-9b8c-7d6e5f4a3b2c\n",
 "id=ch_3QkT7uHw2mVb9ZxA0aB1cD2e\n"]
--- no_error_log
[error]



=== TEST 6: a unicode-escaped id is decoded first (UTF-8), then validated: ASCII passes, a non-ASCII one is 400, or its SHA-256 with digest; a key given twice: the last one, as applications read it
--- config
    location /plain {
        idem on;
        idem_call_id_json event_id;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /digest {
        idem on;
        idem_call_id_json event_id digest;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "id=$http_x_call_id";
    }
--- request eval
["POST /plain\n{\"type\":\"event_callback\",\"event_id\":\"\\u0045v08\\u004bJ3\"}",
 "POST /plain\n{\"event_id\":\"caf\\u00e9-1\"}",
 "POST /digest\n{\"event_id\":\"caf\\u00e9-1\"}",
 "POST /digest\n{\"event_id\":\"ok-6\"}",
 "POST /plain\n{\"event_id\":\"first-6\",\"event_id\":\"last-6\"}"]
--- error_code eval
[200, 400, 200, 200, 200]
--- response_headers_like eval
["X-Call-Id: Ev08KJ3", "Content-Type: application/problem\\+json",
 "X-Call-Id: " . Digest::SHA::sha256_hex("caf\xc3\xa9-1"), "X-Call-Id: ok-6",
 "X-Call-Id: last-6"]
--- response_body_like eval
['\Aid=Ev08KJ3\n\z',
 '"detail":"body field \\\\"event_id\\\\": byte 0xc3 at offset 3 is not allowed"',
 '\Aid=' . Digest::SHA::sha256_hex("caf\xc3\xa9-1") . '\n\z',
 '\Aid=ok-6\n\z',
 '\Aid=last-6\n\z']
--- no_error_log
[error]



=== TEST 7: no id in the body: not JSON, a missing field, null, an object, an array, a float, a boolean, an integer past 64 bits, trailing bytes, a truncated body, an empty string, no body; 400 naming the path, nothing forwarded
--- config
    location /hook {
        idem on;
        idem_call_id_json data.id;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "forwarded";
    }
--- request eval
["POST /hook\nid=evt_1&type=charge",
 "POST /hook\n{\"data\":{\"object\":{\"id\":\"evt_1\"}}}",
 "POST /hook\n{\"data\":{\"id\":null}}",
 "POST /hook\n{\"data\":{\"id\":{\"v\":\"evt_1\"}}}",
 "POST /hook\n{\"data\":{\"id\":[\"evt_1\"]}}",
 "POST /hook\n{\"data\":{\"id\":1.5}}",
 "POST /hook\n{\"data\":{\"id\":true}}",
 "POST /hook\n{\"data\":{\"id\":99999999999999999999999}}",
 "POST /hook\n{\"data\":{\"id\":\"evt_1\"}} x",
 "POST /hook\n{\"data\":{\"id\":\"evt_1\"}",
 "POST /hook\n{\"data\":{\"id\":\"\"}}",
 "GET /hook"]
--- error_code eval
[(400) x 12]
--- response_body_like eval
['"detail":"body field \\\\"data.id\\\\": missing: the body is not JSON"',
 '"detail":"body field \\\\"data.id\\\\": missing: no such field"',
 '"detail":"body field \\\\"data.id\\\\": missing: null"',
 '"detail":"body field \\\\"data.id\\\\": missing: an object"',
 '"detail":"body field \\\\"data.id\\\\": missing: an array"',
 '"detail":"body field \\\\"data.id\\\\": missing: a number that is not an integer"',
 '"detail":"body field \\\\"data.id\\\\": missing: a boolean"',
 '"detail":"body field \\\\"data.id\\\\": missing: an integer at or past a 64-bit bound"',
 '"detail":"body field \\\\"data.id\\\\": missing: the body is not JSON"',
 '"detail":"body field \\\\"data.id\\\\": missing: the body is not JSON"',
 '"type":"[^"]*invalid-call-id".*"detail":"body field \\\\"data.id\\\\": empty value"',
 '"detail":"body field \\\\"data.id\\\\": missing: the body is not JSON"']
--- no_error_log
[error]
forwarded



=== TEST 8: a body past max= is not parsed at all, even with the field in its first bytes (with a length, chunked); at max= it is
--- config
    location /hook {
        idem on;
        idem_call_id_json id max=1k;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "id=$http_x_call_id";
    }
--- request eval
["POST /hook\n{\"id\":\"evt_8\",\"pad\":\"" . ("x" x 1100) . "\"}",
 "POST /hook\n" . main::chunked("{\"id\":\"evt_8\",\"pad\":\"" . ("x" x 1100) . "\"}"),
 "POST /hook\n{\"id\":\"evt_8\",\"pad\":\"" . ("x" x (1024 - 23)) . "\"}"]
--- more_headers eval
["", "Transfer-Encoding: chunked", ""]
--- error_code eval
[400, 400, 200]
--- response_body_like eval
['"detail":"body field \\\\"id\\\\": missing: the body is longer than max="',
 '"detail":"body field \\\\"id\\\\": missing: the body is longer than max="',
 '\Aid=evt_8\n\z']
--- no_error_log
[error]



=== TEST 9: a body spooled to a file (client_body_buffer_size 256): the id found, the body upstream byte for byte, and deduped (the digest fed as it arrived); chunked the same
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /github {
        idem on;
        idem_call_id_json head_commit.id;
        idem_call_id_missing reject;
        idem_dedupe on;
        idem_dedupe_scope off;
        client_body_buffer_size 256;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /chunked {
        idem on;
        idem_call_id_json id;
        idem_call_id_missing reject;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /github\n" . main::payload('github-push.json'),
 "POST /github\n" . main::payload('github-push.json'),
 "POST /github\n" . (main::payload('github-push.json') =~ s/"forced":false/"forced":true/r),
 "POST /chunked\n" . main::chunked(main::payload('sns-notification.json') =~ s/"MessageId"/"id"/r),
 "POST /chunked\n" . main::chunked(main::payload('sns-notification.json') =~ s/"MessageId"/"id"/r)]
--- more_headers eval
["", "", "", "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"]
--- error_code eval
[200, 200, 422, 200, 200]
--- response_headers_like eval
["X-Call-Id: a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6", "Idempotent-Replayed: true", "",
 "X-Call-Id: 5b7c1e2d-9a3f-5e4b-8c6d-0f1a2b3c4d5e", "Idempotent-Replayed: true"]
--- response_body_like eval
[main::forwarded(main::payload('github-push.json')),
 main::forwarded(main::payload('github-push.json')),
 '"type":"[^"]*payload-mismatch"',
 main::forwarded(main::payload('sns-notification.json') =~ s/"MessageId"/"id"/r),
 main::forwarded(main::payload('sns-notification.json') =~ s/"MessageId"/"id"/r)]
--- error_log
a client request body is buffered to a temporary file
--- no_error_log
[error]



=== TEST 10: HTTP/2 (nginx's grpc_pass is the h2 client): the first delivery forwarded, its resend replayed
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location /h2/stripe {
            idem on;
            idem_call_id_json id;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            client_body_buffer_size 256;
            proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
        }
    }
--- config
    location /h2/ {
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /h2/stripe\n" . (main::payload('stripe-charge-succeeded.json') =~ s/evt_3Q/evt_h2_3Q/r),
 "POST /h2/stripe\n" . (main::payload('stripe-charge-succeeded.json') =~ s/evt_3Q/evt_h2_3Q/r)]
--- error_code eval
[200, 200]
--- response_headers eval
["!Idempotent-Replayed\nX-Call-Id: evt_h2_3QkT7uHw2mVb9ZxA1c0dEf4G\nX-Call-Id-Source: body",
 "Idempotent-Replayed: true\nX-Call-Id: evt_h2_3QkT7uHw2mVb9ZxA1c0dEf4G"]
--- response_body_like eval
[main::forwarded(main::payload('stripe-charge-succeeded.json') =~ s/evt_3Q/evt_h2_3Q/r),
 main::forwarded(main::payload('stripe-charge-succeeded.json') =~ s/evt_3Q/evt_h2_3Q/r)]
--- no_error_log
[error]



=== TEST 11: the status endpoint answers by the provider's id (source "body"); a client's X-Call-Id on a body route is dropped, never the id
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /stripe {
        idem on;
        idem_record on;
        idem_call_id_json id;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "id=$http_x_call_id";
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["POST /stripe\n" . main::payload('stripe-charge-succeeded.json'),
 "GET /calls/evt_3QkT7uHw2mVb9ZxA1c0dEf4G"]
--- more_headers eval
["X-Call-Id: not-the-event-id", ""]
--- response_body_like eval
['\Aid=evt_3QkT7uHw2mVb9ZxA1c0dEf4G\n\z',
 '\A\{"call_id":"evt_3QkT7uHw2mVb9ZxA1c0dEf4G",.*"state":"SUCCESS","source":"body",.*"method":"POST","uri":"/stripe"']
--- no_error_log
[error]



=== TEST 12: proxy_request_buffering off where the id is in the body: nginx -t warns that it has no effect (the body is read whole first)
--- config
    location /stripe {
        idem on;
        idem_call_id_json id;
        proxy_request_buffering off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "id=$http_x_call_id";
    }
--- request eval
"POST /stripe\n" . main::payload('stripe-charge-succeeded.json')
--- response_body
id=evt_3QkT7uHw2mVb9ZxA1c0dEf4G
--- error_log
"proxy_request_buffering off" has no effect where "idem_call_id_json" is set: a call id from the body needs the whole body buffered before the call goes upstream
--- no_error_log
[error]



=== TEST 13: metrics: ids by source, and bodies without an id
--- config
    location /stripe {
        idem on;
        idem_call_id_json id;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /plain {
        idem on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        return 200 "ok\n";
    }
    location /metrics {
        idem_metrics;
    }
--- request eval
["POST /stripe\n" . main::payload('stripe-charge-succeeded.json'),
 "POST /stripe\nnot json",
 "POST /plain\n{}",
 "GET /metrics"]
--- more_headers eval
["", "", "X-Call-Id: plain-13", ""]
--- response_body_like eval
["ok", "ok", "ok",
 qr/^idem_call_ids_total\{source="client"\} 1\n^idem_call_ids_total\{source="variable"\} 0\n^idem_call_ids_total\{source="body"\} 1\n^idem_call_ids_total\{source="gateway"\} 1\n(?:#[^\n]*\n)*^idem_body_call_ids_missing_total 1\n/m]
--- no_error_log
[error]



=== TEST 14: a chunked body of unknown length grows its room to max= (64k by default): an id at the end of a 20 KB body is found, one past 64k is not
--- config
    location /hook {
        idem on;
        idem_call_id_json last.id;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location /back {
        echo "id=$http_x_call_id";
    }
--- request eval
["POST /hook\n" . main::chunked("{\"pad\":\"" . ("x" x 20000) . "\",\"last\":{\"id\":\"evt_14\"}}"),
 "POST /hook\n" . main::chunked("{\"pad\":\"" . ("x" x 70000) . "\",\"last\":{\"id\":\"evt_14\"}}")]
--- more_headers
Transfer-Encoding: chunked
--- error_code eval
[200, 400]
--- response_body_like eval
['\Aid=evt_14\n\z',
 '"detail":"body field \\\\"last.id\\\\": missing: the body is longer than max="']
--- no_error_log
[error]
