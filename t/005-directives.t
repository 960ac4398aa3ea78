# nginx -t rejects bad directive values with a message naming the directive
# and the value.

use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): 67 of its 75 blocks are configurations nginx must
# refuse (no request, no worker); running each twice only doubles the time.

no_long_string();
run_tests();

__DATA__

=== TEST 1: idem takes on or off
--- config
    location /t { idem yes; }
--- must_die
--- error_log
invalid value "yes" in "idem" directive, it must be "on" or "off"



=== TEST 2: idem_call_id_missing
--- config
    location /t { idem_call_id_missing maybe; }
--- must_die
--- error_log
invalid value "maybe" in "idem_call_id_missing" directive, it must be "generate" or "reject"



=== TEST 3: idem_call_id_generator
--- config
    location /t { idem_call_id_generator uuid7; }
--- must_die
--- error_log
invalid value "uuid7" in "idem_call_id_generator" directive, it must be "uuid" or "prefixed"



=== TEST 4: idem_call_id_max_length below 1
--- config
    location /t { idem_call_id_max_length 0; }
--- must_die
--- error_log
invalid value "0" in "idem_call_id_max_length" directive, it must be a number from 1 to 255



=== TEST 5: idem_call_id_max_length above 255
--- config
    location /t { idem_call_id_max_length 256; }
--- must_die
--- error_log
invalid value "256" in "idem_call_id_max_length" directive, it must be a number from 1 to 255



=== TEST 6: idem_call_id_max_length not a number
--- config
    location /t { idem_call_id_max_length 12k; }
--- must_die
--- error_log
invalid value "12k" in "idem_call_id_max_length" directive



=== TEST 7: idem_call_id_max_length shorter than the generated ids
--- config
    location /t { idem on; idem_call_id_max_length 20; }
--- must_die
--- error_log
"idem_call_id_max_length" 20 is shorter than the generated call ids (36 bytes)



=== TEST 8: a short maximum is fine when missing ids are rejected
--- config
    location /t {
        idem on;
        idem_call_id_max_length 20;
        idem_call_id_missing reject;
        return 200 "ok\n";
    }
--- request
GET /t
--- more_headers
X-Call-Id: short
--- response_body
ok
--- no_error_log
[error]



=== TEST 9: idem_call_id_pattern must compile
--- config
    location /t { idem_call_id_pattern "^(ord"; }
--- must_die
--- error_log
invalid value "^(ord" in "idem_call_id_pattern" directive



=== TEST 10: idem_call_id_header must be a header name
--- config
    location /t { idem_call_id_header "X Call"; }
--- must_die
--- error_log
invalid header name "X Call" in "idem_call_id_header" directive



=== TEST 11: idem_trace_id_header must be a header name
--- config
    location /t { idem_trace_id_header "X-Trace:"; }
--- must_die
--- error_log
invalid header name "X-Trace:" in "idem_trace_id_header" directive



=== TEST 12: call id and trace id headers must differ
--- config
    location /t { idem_trace_id_header x-call-id; }
--- must_die
--- error_log
"idem_call_id_header" and "idem_trace_id_header" must differ



=== TEST 13: idem_call_id_prefix uses the call id charset
--- config
    location /t { idem_call_id_prefix "gw/1"; }
--- must_die
--- error_log
invalid value "gw/1" in "idem_call_id_prefix" directive



=== TEST 14: idem_call_id_prefix may not be empty
--- config
    location /t { idem_call_id_prefix ""; }
--- must_die
--- error_log
invalid value "" in "idem_call_id_prefix" directive



=== TEST 15: idem_node_id uses the call id charset
--- http_config
    idem_node_id "node 1";
--- config
--- must_die
--- error_log
invalid value "node 1" in "idem_node_id" directive



=== TEST 16: idem_node_id belongs to the http block
--- config
    idem_node_id n1;
--- must_die
--- error_log
"idem_node_id" directive is not allowed here



=== TEST 17: a prefixed id that cannot fit the maximum length
--- http_config
    idem_node_id a-rather-long-node-name;
--- config
    location /t {
        idem on;
        idem_call_id_generator prefixed;
        idem_call_id_max_length 40;
    }
--- must_die
--- error_log
"idem_call_id_max_length" 40 is shorter than the generated call ids (49 bytes)



=== TEST 18: duplicates
--- config
    location /t { idem_call_id_missing reject; idem_call_id_missing reject; }
--- must_die
--- error_log
"idem_call_id_missing" directive is duplicate



=== TEST 19: idem is a flag with one argument
--- config
    location /t { idem on off; }
--- must_die
--- error_log
invalid number of arguments in "idem" directive



=== TEST 20: idem_deadline takes a time or off
--- config
    location /t { idem_deadline soon; }
--- must_die
--- error_log
invalid value "soon" in "idem_deadline" directive, it must be a time greater than 0 or "off"



=== TEST 21: idem_deadline may not be 0
--- config
    location /t { idem_deadline 0; }
--- must_die
--- error_log
invalid value "0" in "idem_deadline" directive



=== TEST 22: idem_deadline_header must be a header name or off
--- config
    location /t { idem_deadline_header "X Deadline"; }
--- must_die
--- error_log
invalid header name "X Deadline" in "idem_deadline_header" directive



=== TEST 23: idem_idempotent is a flag
--- config
    location /t { idem_idempotent sometimes; }
--- must_die
--- error_log
invalid value "sometimes" in "idem_idempotent" directive, it must be "on" or "off"



=== TEST 24: idem_retry_unsent is a flag
--- config
    location /t { idem_retry_unsent 1; }
--- must_die
--- error_log
invalid value "1" in "idem_retry_unsent" directive, it must be "on" or "off"



=== TEST 25: idem_retry attempts from 1 to 100
--- config
    location /t { idem_retry 0; }
--- must_die
--- error_log
invalid value "0" in "idem_retry" directive, the number of attempts must be from 1 to 100



=== TEST 26: idem_retry attempts above 100
--- config
    location /t { idem_retry 101; }
--- must_die
--- error_log
invalid value "101" in "idem_retry" directive, the number of attempts must be from 1 to 100



=== TEST 27: idem_retry backoff must be a time
--- config
    location /t { idem_retry 3 backoff=fast; }
--- must_die
--- error_log
invalid parameter "backoff=fast" in "idem_retry" directive



=== TEST 28: idem_retry unknown parameter
--- config
    location /t { idem_retry 3 jitter=on; }
--- must_die
--- error_log
invalid parameter "jitter=on" in "idem_retry" directive



=== TEST 29: idem_retry on= takes known failures only
--- config
    location /t { idem_retry 3 on=error,http_404; }
--- must_die
--- error_log
invalid value "http_404" in "idem_retry" directive, "on" takes error, timeout, http_500, http_502, http_503, http_504, http_429



=== TEST 30: idem_retry per_try_timeout may not be 0
--- config
    location /t { idem_retry 3 per_try_timeout=0; }
--- must_die
--- error_log
invalid parameter "per_try_timeout=0" in "idem_retry" directive



=== TEST 31: idem_retry max_backoff must be a time
--- config
    location /t { idem_retry 3 max_backoff=-1s; }
--- must_die
--- error_log
invalid parameter "max_backoff=-1s" in "idem_retry" directive



=== TEST 32: idem_retry with every parameter
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 5 backoff=20ms max_backoff=2s per_try_timeout=1s on=error,timeout,http_500,http_502,http_503,http_504,http_429;
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- no_error_log
[error]



=== TEST 33: idem_retry is duplicate
--- config
    location /t { idem_retry 3; idem_retry 4; }
--- must_die
--- error_log
"idem_retry" directive is duplicate



=== TEST 34: idem_record needs idem_redis
--- config
    location /t { idem on; idem_record on; }
--- must_die
--- error_log
"idem_record" is on but there is no "idem_redis" to record into



=== TEST 35: idem_status needs idem_redis
--- config
    location /calls/ { idem_status; }
--- must_die
--- error_log
"idem_status" needs "idem_redis" to read records from



=== TEST 36: idem_redis takes a host name only with a resolver in http{} (a name is never resolved with a blocking call)
--- http_config
    idem_redis redis.example:6379;
--- config
--- must_die
--- error_log
"idem_redis redis.example:6379" names a host: add a "resolver" to http{}



=== TEST 37: idem_redis belongs to the http block
--- config
    idem_redis 127.0.0.1:6379;
--- must_die
--- error_log
"idem_redis" directive is not allowed here



=== TEST 38: idem_record_ttl takes a time, not off
--- http_config
    idem_record_ttl off;
--- config
--- must_die
--- error_log
invalid value "off" in "idem_record_ttl" directive, it must be a time greater than 0



=== TEST 39: idem_key_prefix uses the call id charset
--- http_config
    idem_key_prefix "my app";
--- config
--- must_die
--- error_log
invalid value "my app" in "idem_key_prefix" directive



=== TEST 40: idem_redis with a bad parameter
--- http_config
    idem_redis 127.0.0.1:6379 db=x;
--- config
--- must_die
--- error_log
"idem_redis" directive



=== TEST 41: idem_status takes at most an id, resolve= and scope_digest=
--- config
    location /calls/ { idem_status $1 $2 resolve=on scope_digest=on; }
--- must_die
--- error_log
invalid number of arguments in "idem_status" directive



=== TEST 42: idem_metrics takes unknown_interval= and unknown_max= only
--- config
    location /m { idem_metrics on; }
--- must_die
--- error_log
invalid parameter "on" in "idem_metrics" directive



=== TEST 43: idem_record_arrival_delay takes a time
--- config
    location /t { idem_record_arrival_delay soon; }
--- must_die
--- error_log
"idem_record_arrival_delay" directive invalid value



=== TEST 44: idem_retry where the route is not idempotent warns, naming the location; not where it is, nor at one attempt
--- config
    location /t {
        idem on;
        idem_retry 5;
        return 204;
    }
    location /idempotent {
        idem on;
        idem_idempotent on;
        idem_retry 5;
        return 204;
    }
    location /once {
        idem on;
        idem_retry 1;
        return 204;
    }
--- request
GET /t
--- error_code: 204
--- error_log
"idem_retry 5" in location "/t" where "idem_idempotent" is off: its calls get one attempt
--- no_error_log
location "/idempotent"
location "/once"
[error]



=== TEST 45: idem_idempotent and idem_retry where idem is off warn; not at the server's level, whose locations turn idem on
--- config
    idem_idempotent on;
    location /t {
        idem on;
        return 204;
    }
    location /off {
        idem_idempotent on;
        return 204;
    }
    location /off2 {
        idem_retry 3;
        return 204;
    }
--- request
GET /t
--- error_code: 204
--- error_log
"idem_idempotent" is set in location "/off" where "idem" is off: it has no effect there
"idem_retry" is set in location "/off2" where "idem" is off: it has no effect there
--- no_error_log
location "/t"
[error]



=== TEST 46: a deadline that looks like milliseconds, or longer than 10 minutes, warns; 2s and 5000ms do not
--- config
    location /t {
        idem on;
        idem_deadline 2000;
        return 204;
    }
    location /long {
        idem on;
        idem_deadline 15m;
        return 204;
    }
    location /fine {
        idem on;
        idem_deadline 2s;
        return 204;
    }
    location /fine-ms {
        idem on;
        idem_deadline 5000ms;
        return 204;
    }
--- request
GET /t
--- error_code: 204
--- error_log
"idem_deadline 2000" is 2000 seconds: a number without a unit is seconds ("2000ms" for milliseconds)
"idem_deadline 15m" is longer than 10 minutes
--- no_error_log
"idem_deadline 2s"
"idem_deadline 5000ms"
[error]



=== TEST 47: idem_status scope_digest= takes on or off
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ { idem_status scope_digest=yes; }
--- must_die
--- error_log
invalid value "scope_digest=yes" in "idem_status" directive, it must be "scope_digest=on" or "scope_digest=off"



=== TEST 48: idem_dedupe_client_abort takes run or abort
--- config
    location /t { idem_dedupe_client_abort stop; }
--- must_die
--- error_log
invalid value "stop" in "idem_dedupe_client_abort" directive, it must be "run" or "abort"



=== TEST 49: idem_dedupe_client_abort takes one value
--- config
    location /t { idem_dedupe_client_abort run abort; }
--- must_die
--- error_log
invalid number of arguments in "idem_dedupe_client_abort" directive



=== TEST 50: idem_dedupe_client_abort run and abort are accepted in http, server and location
--- http_config
    idem_dedupe_client_abort abort;
--- config
    idem_dedupe_client_abort run;
    location /t {
        idem_dedupe_client_abort abort;
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- no_error_log
[error]



=== TEST 51: idem_dedupe_replay grpc= refuses a status it does not know
--- config
    location /t { idem_dedupe_replay 2xx grpc=OK,GONE; }
--- must_die
--- error_log
invalid gRPC status "GONE" in "idem_dedupe_replay" directive, it must be a name (OK, NOT_FOUND ...) or a number (0 to 16)



=== TEST 52: ... a number past 16
--- config
    location /a { idem_dedupe_replay grpc=17; }
--- must_die
--- error_log
invalid gRPC status "17" in "idem_dedupe_replay" directive



=== TEST 53: ... an empty list
--- config
    location /a { idem_dedupe_replay grpc=; }
--- must_die
--- error_log
invalid gRPC status "" in "idem_dedupe_replay" directive



=== TEST 54: ... an empty item
--- config
    location /a { idem_dedupe_replay grpc=OK,,5; }
--- must_die
--- error_log
invalid gRPC status "" in "idem_dedupe_replay" directive



=== TEST 55: ... and a second grpc=
--- config
    location /a { idem_dedupe_replay grpc=OK grpc=5; }
--- must_die
--- error_log
duplicate "grpc=" in "idem_dedupe_replay" directive



=== TEST 56: idem_dedupe_replay with grpc= alone, with codes, by names in any case and by numbers
--- config
    location /a {
        idem_dedupe_replay grpc=OK,not_found,Unavailable,16;
        return 200 "a\n";
    }
    location /b {
        idem_dedupe_replay 2xx 409 grpc=0;
        return 200 "b\n";
    }
--- request
GET /a
--- response_body
a
--- no_error_log
[error]



=== TEST 57: idem_call_id_from needs a variable
--- config
    location /t { idem_call_id_from fixed-id; }
--- must_die
--- error_log
invalid value "fixed-id" in "idem_call_id_from" directive, it must hold a variable



=== TEST 58: idem_call_id_json refuses a path that is not keys and [indexes]
--- config
    location /t { idem_call_id_json data..id; }
--- must_die
--- error_log
invalid path "data..id" in "idem_call_id_json" directive: an empty key



=== TEST 59: idem_call_id_json refuses an index that is not digits
--- config
    location /t { idem_call_id_json Records[first].messageId; }
--- must_die
--- error_log
invalid path "Records[first].messageId" in "idem_call_id_json" directive: an index that is not [digits]



=== TEST 60: idem_call_id_json max= is a size from 2 to 16m
--- config
    location /t { idem_call_id_json id max=1g; }
--- must_die
--- error_log
invalid value "max=1g" in "idem_call_id_json" directive, max must be a size from 2 to 16m



=== TEST 61: idem_call_id_json with an unknown parameter
--- config
    location /t { idem_call_id_json id hash; }
--- must_die
--- error_log
invalid parameter "hash" in "idem_call_id_json" directive



=== TEST 62: idem_call_id_from and idem_call_id_json in one place
--- config
    location /t {
        idem_call_id_from $http_x_github_delivery;
        idem_call_id_json id;
    }
--- must_die
--- error_log
"idem_call_id_from" and "idem_call_id_json" are both set here



=== TEST 63: idem_dedupe_fingerprint is "method uri" or "method uri body"
--- config
    location /t { idem_dedupe_fingerprint method body; }
--- must_die
--- error_log
invalid parameter "body" in "idem_dedupe_fingerprint" directive



=== TEST 64: idem_resend_limit names a zone no idem_resend_limit_zone declares
--- config
    location /t { idem_resend_limit zone=nosuch concurrent=1; }
--- must_die
--- error_log
"idem_resend_limit" names the unknown zone "nosuch": no "idem_resend_limit_zone" declares it



=== TEST 65: idem_resend_limit with burst= on a zone without rate=
--- http_config
    idem_resend_limit_zone $binary_remote_addr zone=r:1m;
--- config
    location /t { idem_resend_limit zone=r burst=5; }
--- must_die
--- error_log
"idem_resend_limit" has burst= but its zone "r" has no rate=



=== TEST 66: idem_resend_limit that limits nothing (no rate=, no concurrent=)
--- http_config
    idem_resend_limit_zone $binary_remote_addr zone=r:1m;
--- config
    location /t { idem_resend_limit zone=r; }
--- must_die
--- error_log
"idem_resend_limit" limits nothing: its zone "r" has no rate= and it has no concurrent=



=== TEST 67: idem_resend_limit_zone with a size that is not one
--- http_config
    idem_resend_limit_zone $binary_remote_addr zone=r:lots rate=1r/s;
--- config
    location /t { return 204; }
--- must_die
--- error_log
invalid zone size "zone=r:lots" in "idem_resend_limit_zone" directive, it must be "zone=name:size"



=== TEST 68: idem_resend_limit_zone too small
--- http_config
    idem_resend_limit_zone $binary_remote_addr zone=r:4k rate=1r/s;
--- config
    location /t { return 204; }
--- must_die
--- error_log
zone "r" of "idem_resend_limit_zone" is too small: "4k", it must be at least 32k



=== TEST 69: idem_resend_limit_zone without a size, or without a zone
--- http_config
    idem_resend_limit_zone $binary_remote_addr zone=r rate=1r/s;
--- config
    location /t { return 204; }
--- must_die
--- error_log
invalid zone size "zone=r" in "idem_resend_limit_zone" directive



=== TEST 70: idem_resend_limit_zone with a bad rate
--- http_config
    idem_resend_limit_zone $binary_remote_addr zone=r:1m rate=fast;
--- config
    location /t { return 204; }
--- must_die
--- error_log
invalid rate "rate=fast" in "idem_resend_limit_zone" directive



=== TEST 71: two idem_resend_limit_zone of one name
--- http_config
    idem_resend_limit_zone $binary_remote_addr zone=r:1m rate=1r/s;
    idem_resend_limit_zone $http_x_api_key zone=r:1m rate=1r/s;
--- config
    location /t { return 204; }
--- must_die
--- error_log
duplicate "idem_resend_limit_zone" "r"



=== TEST 72: two idem_resend_limit in one location
--- http_config
    idem_resend_limit_zone $binary_remote_addr zone=r:1m rate=1r/s;
--- config
    location /t {
        idem_resend_limit zone=r;
        idem_resend_limit zone=r concurrent=2;
    }
--- must_die
--- error_log
"idem_resend_limit" directive is duplicate



=== TEST 73: idem_resend_limit with concurrent=0 or an unknown parameter
--- http_config
    idem_resend_limit_zone $binary_remote_addr zone=r:1m rate=1r/s;
--- config
    location /t { idem_resend_limit zone=r concurrent=0; }
--- must_die
--- error_log
invalid value "concurrent=0" in "idem_resend_limit" directive, concurrent= must be a number from 1 to 1000000



=== TEST 74: idem_resend_limit_zone's name used by another module's zone
--- http_config
    limit_req_zone $binary_remote_addr zone=r:1m rate=1r/s;
    idem_resend_limit_zone $binary_remote_addr zone=r:1m rate=1r/s;
--- config
    location /t { return 204; }
--- must_die
--- error_log
the shared memory zone "r" is already declared for a different use



=== TEST 75: idem_resend_limit in a location that neither dedupes nor records: a warning, nginx runs
--- http_config
    idem_resend_limit_zone $binary_remote_addr zone=r:1m rate=1r/s;
--- config
    location /t {
        idem on;
        idem_resend_limit zone=r;
        return 204;
    }
--- request
GET /t
--- error_code: 204
--- error_log
"idem_resend_limit" is set in location "/t" where "idem" is off or neither "idem_dedupe" nor "idem_record" is on: it has no effect there
--- no_error_log
[error]



=== TEST 76: idem_otel_endpoint over https: refused, with what to do instead
--- http_config
    idem_otel_endpoint https://127.0.0.1:4318/v1/traces;
--- config
    location /t { idem on; return 204; }
--- must_die
--- error_log
"https://127.0.0.1:4318/v1/traces": https is not supported by idem_otel_endpoint; send to a collector on loopback or a private network over http://



=== TEST 77: idem_otel_endpoint that is no http:// URL
--- http_config
    idem_otel_endpoint 127.0.0.1:4318;
--- config
    location /t { idem on; return 204; }
--- must_die
--- error_log
invalid idem_otel_endpoint "127.0.0.1:4318": http://host[:port]/path expected



=== TEST 78: idem_otel_buffer under 16k
--- http_config
    idem_otel_endpoint http://127.0.0.1:4318/v1/traces;
    idem_otel_buffer 4k;
--- config
    location /t { idem on; return 204; }
--- must_die
--- error_log
idem_otel_buffer must be at least 16k



=== TEST 79: idem_otel_endpoint only in http{}
--- config
    location /t { idem_otel_endpoint http://127.0.0.1:4318/v1/traces; }
--- must_die
--- error_log
"idem_otel_endpoint" directive is not allowed here



=== TEST 80: idem_metrics unknown_interval= takes a time over 0
--- config
    location /m { idem_metrics unknown_interval=0; }
--- must_die
--- error_log
invalid value "unknown_interval=0" in "idem_metrics" directive, unknown_interval takes a time over 0



=== TEST 81: idem_metrics unknown_max= takes 1 to 10000
--- config
    location /m { idem_metrics unknown_max=10001; }
--- must_die
--- error_log
invalid value "unknown_max=10001" in "idem_metrics" directive, unknown_max takes 1 to 10000



=== TEST 82: two idem_metrics locations show one zone: their unknown_interval= must agree
--- config
    location /m { idem_metrics unknown_interval=5s unknown_max=50; }
    location /m2 { idem_metrics unknown_interval=10s; }
--- must_die
--- error_log
"unknown_interval=10s" in "idem_metrics" directive differs from an earlier idem_metrics



=== TEST 83: idem_metrics with both parameters, and one that repeats them
--- config
    location /m { idem_metrics unknown_interval=5s unknown_max=50; }
    location /m2 { idem_metrics unknown_max=50; }
--- request
GET /m
--- error_code: 200
