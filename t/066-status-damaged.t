# The status endpoint on a record that was damaged in the store (written by
# hand, by another version, or cut short): its answer is still JSON.

use Test::Nginx::Socket 'no_plan';

repeat_each(2);

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: numbers with leading zeros are null, a damaged attempt is left out
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
--- init
my $port = $ENV{TEST_NGINX_REDIS_PORT};
my $trace = '4bf92f3577b34da6a3ce929d0e0e4736';
system("redis-cli -p $port del 'idem:c:{dmg-1}' >/dev/null");
system("redis-cli -p $port hset 'idem:c:{dmg-1}'"
       . " e:t1 'R 1700000000000 client gw POST $trace /pay'"
       . " f:t1 'SUCCESS 0200 1700000000900 1700000000000 client gw POST"
       . " $trace /pay'"
       . " a:t1:1 'cut short' a:t1:2 '01 5 ok 1 200 -' >/dev/null");
--- request
GET /calls/dmg-1
--- response_body
{"call_id":"dmg-1","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","state":"SUCCESS","source":"client","node":"gw","method":"POST","uri":"/pay","created_ms":1700000000000,"updated_ms":1700000000900,"final_status":null,"executions":1,"attempts":[{"execution":1,"n":2,"start_ms":null,"duration_ms":5,"outcome":"ok","sent":true,"status":200,"span_id":""}]}
--- no_error_log
[error]



=== TEST 2: a summary that counts more successes than it summarises is ignored
The trim never writes one: believed, it made the call SUCCESS with no
execution that succeeded.
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
--- init
my $port = $ENV{TEST_NGINX_REDIS_PORT};
my $trace = '4bf92f3577b34da6a3ce929d0e0e4736';
system("redis-cli -p $port del 'idem:c:{dmg-2}' >/dev/null");
system("redis-cli -p $port hset 'idem:c:{dmg-2}'"
       . " x '0 10 0 1700000000500 200 1699999999000 client gw POST"
       . " $trace /pay'"
       . " e:t1 'R 1700000000000 client gw POST $trace /pay'"
       . " f:t1 'FAILED 502 1700000000900 1700000000000 client gw POST"
       . " $trace /pay' >/dev/null");
--- request
GET /calls/dmg-2
--- response_body
{"call_id":"dmg-2","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","state":"FAILED","source":"client","node":"gw","method":"POST","uri":"/pay","created_ms":1700000000000,"updated_ms":1700000000900,"final_status":502,"executions":1,"attempts":[]}
--- no_error_log
[error]
