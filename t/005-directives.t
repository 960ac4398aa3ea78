# nginx -t rejects bad directive values with a message naming the directive
# and the value.

use Test::Nginx::Socket 'no_plan';

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
