# A claim must not outlive the request that made it.  A request parked on
# its claim while Redis is paused is ended by a worker shutting down
# (worker_shutdown_timeout); its claim, which Redis runs once resumed, is
# released by the request's final write, sent after it on the same
# connection.  The same call id sent again then runs, instead of reading
# as in flight until the lease ends.
#
# Plain Test::More: this needs a master process, a graceful shutdown while
# a request waits, and Redis paused and resumed around it, which is outside
# the Test::Nginx format.

use strict;
use warnings;
use Test::More;
use IO::Socket::INET;
use File::Path qw(make_path remove_tree);
use Time::HiRes qw(sleep);
use Cwd qw(abs_path);

BEGIN {
    plan skip_all => 'TEST_NGINX_REDIS_FAULT_PORT is not set (use make test)'
        unless $ENV{TEST_NGINX_REDIS_FAULT_PORT}
               && $ENV{TEST_NGINX_BACKEND_PORT};
}

use lib 't/lib';
use RedisFault;

my $root = abs_path(__FILE__ =~ m{^(.*)/t/} ? $1 : '.');
my $nginx = $ENV{TEST_NGINX_BINARY} || 'nginx';
my $redis = $ENV{TEST_NGINX_REDIS_FAULT_PORT};
my $backend = $ENV{TEST_NGINX_BACKEND_PORT};
my $port = ($ENV{TEST_NGINX_SERVER_PORT} || 1984) + 85;
my $sr = "$root/t/servroot-shutdown-$port";
my @modules = split ' ', ($ENV{TEST_NGINX_LOAD_MODULES} || '');
my $id = "shut-$$-" . int(rand(1e9));

END {
    local $?;
    RedisFault::stop();
}

RedisFault::start();

remove_tree($sr);
make_path("$sr/conf", "$sr/logs");

my $load = join '', map { "load_module $_;\n" } @modules;
my $user = $> == 0 ? "user root;\n" : '';

open my $fh, '>', "$sr/conf/nginx.conf" or die $!;
print $fh <<"CONF";
${load}${user}worker_processes 1;
master_process on;
daemon on;
error_log $sr/logs/error.log info;
pid $sr/logs/nginx.pid;
worker_shutdown_timeout 300ms;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $sr/client_body_temp;
    proxy_temp_path $sr/proxy_temp;
    fastcgi_temp_path $sr/fastcgi_temp;
    uwsgi_temp_path $sr/uwsgi_temp;
    scgi_temp_path $sr/scgi_temp;
    idem_redis 127.0.0.1:$redis timeout=5s;
    server {
        listen 127.0.0.1:$port;
        location /d {
            idem on;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            proxy_pass http://127.0.0.1:$backend/ok;
        }
    }
}
CONF
close $fh;

sub start_nginx {
    is(system("$nginx -p $sr/ -c $sr/conf/nginx.conf -e $sr/logs/error.log"),
       0, 'nginx starts') or BAIL_OUT('nginx does not start');

    for (1 .. 50) {
        last if IO::Socket::INET->new("127.0.0.1:$port");
        sleep 0.1;
    }
}

sub master {
    open my $f, '<', "$sr/logs/nginx.pid" or return;
    my $pid = <$f>;
    chomp $pid;
    return $pid;
}

sub stop_nginx {
    my $pid = master() or return;
    kill 'QUIT', $pid;
    for (1 .. 150) {
        return 1 unless kill 0, $pid;
        sleep 0.1;
    }
    return 0;
}

sub post {
    return IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Timeout => 10)
        // die "connect: $!";
}

start_nginx();

# the request's claim waits in the paused Redis; the worker ends it

RedisFault::pause();

my $s = post();
print $s "POST /d HTTP/1.0\r\nHost: localhost\r\nX-Call-Id: $id\r\n"
         . "Content-Length: 1\r\n\r\nx";
sleep 0.5;

my $master = master();
kill 'QUIT', $master;
sleep 1;                        # worker_shutdown_timeout ends the request

RedisFault::resume();           # the claim, then its release, run now

my $gone = 0;
for (1 .. 150) {
    $gone = 1, last unless kill 0, $master;
    sleep 0.1;
}
ok($gone, 'the old master and worker exit');

{
    local $/;
    my $res = <$s> // '';
    unlike($res, qr{^HTTP/1\.\d 200 }, 'the parked request got no answer '
                                       . 'from the upstream');
}

my $k = `redis-cli -p $redis --raw hgetall 'idem:c:{$id}'`;
like($k, qr/^o\n/m, 'the claim was made');
like($k, qr/^k:[0-9a-f]{16}\nF$/m, 'and released by the final write');

# the same call again, on a new nginx: it runs

start_nginx();

$s = post();
print $s "POST /d HTTP/1.0\r\nHost: localhost\r\nX-Call-Id: $id\r\n"
         . "Content-Length: 1\r\n\r\nx";
my $res = do { local $/; <$s> } // '';

like($res, qr{^HTTP/1\.1 200 }, 'the call sent again is forwarded');
unlike($res, qr/call-in-flight/, 'not a 409 in flight');
like($res, qr/^n=1 /m, 'the backend runs it for the first time');

ok(stop_nginx(), 'nginx exits');

my $log = do { local (@ARGV, $/) = "$sr/logs/error.log"; <> } // '';
unlike($log, qr/\[(?:alert|crit|emerg)\]|exited on signal/,
       'no alert, no crash in the error log');

done_testing();
