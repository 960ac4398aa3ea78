# Self-test of the Test::Nginx harness (t/compat/, or OpenResty's
# Test::Nginx where installed), with stock nginx and the echo module only:
#
#   TEST_NGINX_BINARY=/usr/sbin/nginx \
#   TEST_NGINX_LOAD_MODULES=/usr/lib/nginx/modules/ngx_http_echo_module.so \
#   prove -r t/000-harness.t

use Test::Nginx::Socket 'no_plan';

repeat_each(2);

run_tests();

__DATA__

=== TEST 1: sanity
--- config
    location = /t {
        echo hello;
    }
--- request
GET /t
--- response_body
hello
--- no_error_log
[error]



=== TEST 2: several requests, expected values as arrays
--- config
    location = /a {
        echo a;
    }
    location = /b {
        return 404 "no b\n";
    }
--- request eval
["GET /a", "GET /b"]
--- error_code eval
[200, 404]
--- response_body eval
["a\n", "no b\n"]
--- no_error_log
[error]



=== TEST 3: more_headers go with every request
--- config
    location = /h {
        echo "foo=$http_x_foo bar=$http_x_bar host=$host";
    }
--- more_headers
X-Foo: foo
X-Bar: bar
--- request eval
["GET /h", "GET /h?again"]
--- response_body eval
["foo=foo bar=bar host=localhost\n", "foo=foo bar=bar host=localhost\n"]



=== TEST 4: response headers, present and absent
--- config
    location = /t {
        add_header X-Set "some value";
        return 200 "ok\n";
    }
--- request
GET /t
--- response_headers
X-Set: some value
Content-Type: text/plain
!X-Absent
--- response_body
ok



=== TEST 5: header and body patterns
--- config
    location = /t {
        add_header X-Num "id-12345";
        return 200 "ok\n";
    }
--- request
GET /t
--- response_headers_like
X-Num: id-\d+
Server: nginx.*
--- raw_response_headers_like: ^HTTP/1\.1 200 OK\r\n
--- response_body_like: ^ok$



=== TEST 6: error_log and no_error_log see what the request logged
--- config
    location = /missing {
    }
--- request
GET /missing
--- error_code: 404
--- wait: 0.1
--- error_log
open() "
No such file or directory
--- no_error_log
[alert]
[emerg]



=== TEST 7: log patterns given with eval
--- config
    location = /missing {
    }
--- request
GET /missing
--- error_code: 404
--- error_log eval
[qr/open\(\) "[^"]+\/missing" failed/, "(2: No such file or directory)"]
--- no_error_log eval
qr/\[(?:crit|alert)\]/



=== TEST 8: must_die with an unknown directive
--- config
    location = /t {
        no_such_directive_here on;
    }
--- must_die
--- error_log
unknown directive "no_such_directive_here"
--- no_error_log
[alert]



=== TEST 9: raw_request is sent verbatim
--- config
    location = /raw {
        echo "proto=$server_protocol host=$host";
    }
--- raw_request eval
"GET /raw HTTP/1.0\r\nHost: raw.example\r\n\r\n"
--- response_body
proto=HTTP/1.0 host=raw.example
--- no_error_log
[error]



=== TEST 10: POST with a body
--- config
    location = /echo {
        echo_read_request_body;
        echo "len=$http_content_length body=$request_body";
    }
--- request
POST /echo
hello world
--- response_body
len=11 body=hello world
--- no_error_log
[error]



=== TEST 11: chunked response body is decoded
--- config
    location = /chunked {
        echo -n "one ";
        echo_flush;
        echo two;
    }
--- request
GET /chunked
--- raw_response_headers_like: Transfer-Encoding: chunked\r\n
--- response_headers
!Content-Length
--- response_body
one two



=== TEST 12: proxy to a slow location of the same server
--- config
    location = /front {
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/back;
    }
    location = /back {
        echo_sleep 0.2;
        echo "from back";
    }
--- request
GET /front
--- timeout: 5
--- response_body
from back
--- no_error_log
[error]



=== TEST 13: a timeout with --- abort is no failure
--- config
    location = /slow {
        echo_sleep 2;
        echo late;
    }
--- request
GET /slow
--- timeout: 0.3
--- abort
--- ignore_response
--- no_error_log
[error]



=== TEST 14: user_files in the html directory
--- config
--- user_files
>>> hello.txt
Hello, world
>>> sub/dir/more.txt
more
--- request eval
["GET /hello.txt", "GET /sub/dir/more.txt"]
--- response_body eval
["Hello, world\n", "more\n"]



=== TEST 15: a backend server on $TEST_NGINX_RAND_PORT_1
--- http_config
    upstream backend {
        server 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
    }

    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;

        location / {
            echo "backend $server_port";
        }
    }
--- config
    location = /t {
        proxy_pass http://backend/;
    }
--- request
GET /t
--- response_body_like: ^backend \d+$
--- no_error_log
[error]



=== TEST 16: main_config and log_level
--- main_config
worker_rlimit_nofile 1024;
--- config
    location = /t {
        echo ok;
    }
--- log_level: warn
--- request
GET /t
--- response_body
ok
--- no_error_log
[debug]
[info]



=== TEST 17: init runs before the requests
--- init
my $file = "$ENV{TEST_NGINX_SERVER_ROOT}/html/from-init.txt";
open my $fh, '>', $file or die "$file: $!";
print $fh "written by init\n";
close $fh;
--- config
--- request
GET /from-init.txt
--- response_body
written by init



=== TEST 18: server port in the config and in expected values
--- config
    location = /t {
        add_header X-Port $server_port;
        echo "port $TEST_NGINX_SERVER_PORT";
    }
--- request
GET /t
--- response_headers
X-Port: $ServerPort
--- response_body
port $ServerPort



=== TEST 19: comment lines and an explicit HTTP version
--- config
    location = /v {
        echo $server_protocol;
    }
--- request
    # a comment before the request line
    GET /v HTTP/1.0
--- response_body
HTTP/1.0



=== TEST 20: skip_nginx skips its count of tests
--- skip_nginx: 2: < 999.0.0
--- config
    location = /t {
        return 500;
    }
--- request
GET /t
--- response_body
never



=== TEST 21: response headers given as a hash (eval), as the real Test::Nginx takes them
--- config
    location = /t {
        add_header X-One 1;
        add_header X-Two two;
        return 204;
    }
--- request
GET /t
--- error_code: 204
--- response_headers eval
{ 'X-One' => '1', 'X-Two' => 'two', 'X-Three' => '' }
