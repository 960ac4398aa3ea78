# Self-test of the Test::Nginx harness (t/compat/, or OpenResty's
# Test::Nginx where installed), with stock nginx and the echo module only:
#
#   TEST_NGINX_BINARY=/usr/sbin/nginx \
#   TEST_NGINX_LOAD_MODULES=/usr/lib/nginx/modules/ngx_http_echo_module.so \
#   prove -r t/000-harness.t

use Test::Nginx::Socket 'no_plan';

use File::Spec ();
use File::Temp ();
use IO::Socket::INET ();

repeat_each(2);

# Runs blocks (their lines given with a leading "|", so that this file's
# parser leaves them alone) as a test file of their own through the compat
# harness, on a free port and a server root of their own; returns its exit
# status and its output.
# $prelude: Perl code of that file before run_tests().
sub sub_run {
    my ($blocks, $prelude) = @_;
    $blocks =~ s/^\|//mg;
    $prelude //= '';
    my $dir = File::Temp::tempdir(CLEANUP => 1);
    open my $fh, '>', "$dir/sub.t" or die "$dir/sub.t: $!";
    print $fh "use Test::Nginx::Socket 'no_plan';\nno_shuffle();\n"
              . "$prelude\nrun_tests();\n\n__DATA__\n\n$blocks";
    close $fh;
    my $port = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                     Listen => 1)->sockport;
    local $ENV{IDEM_TEST_COMPAT} = 1;
    local $ENV{TEST_NGINX_PORT} = $port;
    local $ENV{TEST_NGINX_SERVER_PORT} = $port;
    local $ENV{TEST_NGINX_SERVROOT} = "$dir/servroot";
    local $ENV{TEST_NGINX_RANDOMIZE};
    my $compat = File::Spec->rel2abs('t/compat');
    my $out = `$^X -I$compat $dir/sub.t 2>&1`;
    return ($? >> 8, $out);
}

# The blocks' run fails before any check, saying $why.
sub refused {
    my ($what, $blocks, $why) = @_;
    my ($status, $out) = sub_run($blocks);
    Test::More::isnt($status, 0, "$what: the run fails");
    Test::More::like($out, $why, "$what: saying why");
    Test::More::unlike($out, qr/^ok /m, "$what: before any check");
}

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



=== TEST 21: forms the real Test::Nginx takes: response_headers(_like) as arrays of texts (one per request), response_body as a qr//
--- config
    location = /a {
        add_header X-A a;
        return 200 "aaa\n";
    }
    location = /b {
        add_header X-B b-42;
        return 200 "bbb\n";
    }
--- request eval
["GET /a", "GET /b"]
--- response_headers eval
["X-A: a\n!X-B", "X-B: b-42\n!X-A"]
--- response_body eval
[qr/^a+$/, "bbb\n"]
--- no_error_log eval
[qr/\[error\]/, "[alert]"]



=== TEST 22: response_headers_like as an array, one per request
--- config
    location = /a {
        add_header X-A a-1;
        return 204;
    }
--- request eval
["GET /a", "GET /a?again"]
--- error_code eval
[204, 204]
--- response_headers_like eval
["X-A: a-\\d", "X-A: a-[0-9]"]



=== TEST 23: a sub-run of supported forms passes (the refusals below are the forms' doing)
--- init
my ($status, $out) = main::sub_run(<<'T');
|=== TEST 1: fine
|--- config
|    location = /t {
|        add_header X-One 1;
|        return 200 "ok\n";
|    }
|--- request
|GET /t
|--- response_headers
|X-One: 1
|--- response_body
|ok
T
Test::More::is($status, 0, 'the sub-run passes') or Test::More::diag($out);
Test::More::like($out, qr/^ok \d+ .* - header X-One ok$/m, '... and checks the header');
--- config
--- request
GET /index.html
--- response_body_like: It works



=== TEST 24: response_headers given as a hash (eval) is refused: the real Test::Nginx reads it as one line "HASH(0x...)" and checks nothing
--- init
main::refused('a hash', <<'T', qr/block "TEST 1: hash": --- response_headers given as a hash reference, which the compat Test::Nginx harness \(t\/compat\) cannot interpret there \(it takes text or an array of texts \(one per request\)\)/);
|=== TEST 1: hash
|--- config
|--- request
|GET /index.html
|--- response_headers eval
|{ 'X-One' => '1', 'X-Two' => 'two' }
T
--- config
--- request
GET /index.html
--- response_body_like: It works



=== TEST 25: ... and so is an array of hashes, and response_headers_like as a hash
--- init
main::refused('an array of hashes', <<'T', qr/block "TEST 1: hashes": --- response_headers given as an array of hash reference, which/);
|=== TEST 1: hashes
|--- config
|--- request eval
|["GET /index.html", "GET /index.html"]
|--- response_headers eval
|[{ 'X-One' => '1' }, { 'X-One' => '1' }]
T
main::refused('a hash, for _like', <<'T', qr/block "TEST 1: like": --- response_headers_like given as a hash reference/);
|=== TEST 1: like
|--- config
|--- request
|GET /index.html
|--- response_headers_like eval
|{ 'X-One' => '\d' }
T
--- config
--- request
GET /index.html
--- response_body_like: It works



=== TEST 26: text where a regex or array is taken, but a hash, a list or a code reference is not
--- init
main::refused('a list', <<'T', qr/block "TEST 1: list": --- response_body given as a list of 2 values \(an eval giving a list, not one value\)/);
|=== TEST 1: list
|--- config
|--- request
|GET /index.html
|--- response_body eval
|("a", "b")
T
main::refused('a code reference', <<'T', qr/block "TEST 1: code": --- no_error_log given as a code reference, which .* \(it takes text or a qr\/\/ regex or an array of texts and qr\/\/ regexes \(patterns\)\)/);
|=== TEST 1: code
|--- config
|--- request
|GET /index.html
|--- no_error_log eval
|sub { 1 }
T
main::refused('a regex for a request', <<'T', qr/block "TEST 1: request": --- request given as a qr\/\/ regex/);
|=== TEST 1: request
|--- config
|--- request eval
|qr{GET /}
T
--- config
--- request
GET /index.html
--- response_body_like: It works



=== TEST 27: an unknown section, and one the harness does not support, are refused
--- init
main::refused('a misspelt section', <<'T', qr/block "TEST 1: misspelt": --- no_error_logs is unknown to the compat Test::Nginx harness/);
|=== TEST 1: misspelt
|--- config
|--- request
|GET /index.html
|--- no_error_logs
|[error]
T
main::refused('pipelined_requests', <<'T', qr/block "TEST 1: pipelined": --- pipelined_requests is not supported by the compat Test::Nginx harness/);
|=== TEST 1: pipelined
|--- config
|--- pipelined_requests eval
|["GET /index.html", "GET /index.html"]
T
--- config
--- request
GET /index.html
--- response_body_like: It works



=== TEST 28: a section the block's other one hides (as in the real Test::Nginx) is refused
--- init
main::refused('response_headers_like beside response_headers', <<'T', qr/block "TEST 1: both": --- response_headers_like would be ignored, since the block has --- response_headers/);
|=== TEST 1: both
|--- config
|--- request
|GET /index.html
|--- response_headers
|Content-Type: text/html
|--- response_headers_like
|Content-Length: \d+
T
main::refused('response_body_unlike beside response_body_like', <<'T', qr/block "TEST 1: like and unlike": --- response_body_unlike would be ignored, since the block has --- response_body_like/);
|=== TEST 1: like and unlike
|--- config
|--- request
|GET /index.html
|--- response_body_like
|It works
|--- response_body_unlike
|<script
T
main::refused('error_code beside error_code_like', <<'T', qr/block "TEST 1: codes": --- error_code would be ignored, since the block has --- error_code_like/);
|=== TEST 1: codes
|--- config
|--- request
|GET /index.html
|--- error_code: 200
|--- error_code_like: ^2
T
--- config
--- request
GET /index.html
--- response_body_like: It works



=== TEST 29: an eval that fails is refused, naming the block and the section (Test::Base would hand the error text on as the value: a no_error_log looking for it passes)
--- init
main::refused('a failing eval', <<'T', qr/block "TEST 1: typo": the eval of --- no_error_log failed: syntax error/);
|=== TEST 1: typo
|--- config
|--- request
|GET /index.html
|--- no_error_log eval
|[qr/\[error\]/,
T
--- config
--- request
GET /index.html
--- response_body_like: It works



=== TEST 30: a file a block leaves in the server root stops the run at the next start of nginx, as the real Test::Nginx does (it removes only its own folders there, then the folder: "Can't remove ... (not empty?)"); a test's own files go to IdemPaths::scratch()
--- init
my ($status, $out) = main::sub_run(<<'T');
|=== TEST 1: leaves a file
|--- config
|--- init
|open my $fh, '>', "$ENV{TEST_NGINX_SERVER_ROOT}/stray" or die $!;
|--- request
|GET /index.html
|--- response_body_like: It works
|
|=== TEST 2: the next nginx
|--- config
|    location = /t { return 200; }
|--- request
|GET /t
|--- error_code: 200
T
Test::More::isnt($status, 0, 'a stray file: the run fails');
Test::More::like($out, qr/TEST 2: the next nginx - Can't remove \S+\/servroot \(not empty\?\)/, '... naming the folder');
Test::More::unlike($out, qr/TEST 2: the next nginx - status code ok/, '... before the next block runs');
--- config
--- request
GET /index.html
--- response_body_like: It works



=== TEST 31: --- init runs in the real Test::Nginx's package (Test::Nginx::Util), not main: a sub of the test file called by its bare name fails the run, as main::name it runs
--- init
my $prelude = "sub helper { Test::More::pass('helper ran') }\n";
my ($status, $out) = main::sub_run(<<'T', $prelude);
|=== TEST 1: bare
|--- config
|--- init
|helper();
|--- request
|GET /index.html
|--- response_body_like: It works
T
Test::More::isnt($status, 0, 'a bare name: the run fails');
Test::More::like($out, qr/TEST 1: bare - init failed: Undefined subroutine &Test::Nginx::Util::helper called/, '... saying so');
($status, $out) = main::sub_run(<<'T', $prelude);
|=== TEST 1: qualified
|--- config
|--- init
|main::helper();
|--- request
|GET /index.html
|--- response_body_like: It works
T
Test::More::is($status, 0, 'main::helper: the run passes') or Test::More::diag($out);
Test::More::like($out, qr/^ok \d+ - helper ran$/m, '... and the helper ran');
--- config
--- request
GET /index.html
--- response_body_like: It works



=== TEST 32: $TEST_NGINX_RAND_PORT_<n> is drawn from the server port's own range (port + 976 to + 999, a shard's and no other stage's), not from all of 1985-65535
--- init
my ($status, $out) = main::sub_run(<<'T');
|=== TEST 1: three random ports
|--- config
|    location = /t {
|        return 200 "$TEST_NGINX_SERVER_PORT $TEST_NGINX_RAND_PORT_1 $TEST_NGINX_RAND_PORT_2 $TEST_NGINX_RAND_PORT_3\n";
|    }
|--- request
|GET /t
|--- response_body_like eval
|my $p = $ENV{TEST_NGINX_SERVER_PORT};
|my $r = CORE::join '|', map { $p + $_ } 976 .. 999;
|qr/^$p ($r) ($r) ($r)\n\z/
T
Test::More::is($status, 0, 'the random ports lie in the range') or Test::More::diag($out);
Test::More::like($out, qr/^ok \d+ - .*TEST 1: three random ports - response_body_like - response is expected/m, '... as the block checks');
--- config
--- request
GET /index.html
--- response_body_like: It works
