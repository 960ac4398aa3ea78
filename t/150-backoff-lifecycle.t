# A call waiting out its backoff between two attempts, when the worker
# goes away or the client does:
#   - worker_shutdown_timeout fires during the backoff: no further attempt
#     starts (the worker ends the call and exits);
#   - a reload during the backoff: the old worker finishes the call, the
#     next attempt included;
#   - the client leaves during the backoff: no further attempt.
# The backend asks for the wait with Retry-After; its log (util/backend.pl)
# shows what reached it.
#
# Plain Test::More: this needs a master process, signals and a client that
# leaves at a given time, which is outside the Test::Nginx format.

use strict;
use warnings;
use Test::More;
use IO::Socket::INET;
use File::Path qw(make_path remove_tree);
use Time::HiRes qw(sleep time);
use Cwd qw(abs_path);

BEGIN {
    plan skip_all => 'TEST_NGINX_BACKEND_PORT is not set (use make test)'
        unless $ENV{TEST_NGINX_BACKEND_PORT};
}

my $root = abs_path(__FILE__ =~ m{^(.*)/t/} ? $1 : '.');
my $nginx = $ENV{TEST_NGINX_BINARY} || 'nginx';
my $backend = $ENV{TEST_NGINX_BACKEND_PORT};
my $port = ($ENV{TEST_NGINX_SERVER_PORT} || 1984) + 150;
my $sr = "$root/t/servroot-lifecycle-$port";
my @modules = split ' ', ($ENV{TEST_NGINX_LOAD_MODULES} || '');
my $tag = "$$-" . int(rand(1e9));

remove_tree($sr);
make_path("$sr/conf", "$sr/logs");

my $load = join '', map { "load_module $_;\n" } @modules;
my $user = $> == 0 ? "user root;\n" : '';

# the first attempt gets a 503 asking for 2 s; max_backoff lets it wait
sub write_conf {
    my ($shutdown) = @_;

    open my $fh, '>', "$sr/conf/nginx.conf" or die $!;
    print $fh <<"CONF";
${load}${user}worker_processes 1;
master_process on;
daemon on;
error_log $sr/logs/error.log info;
pid $sr/logs/nginx.pid;
$shutdown
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $sr/client_body_temp;
    proxy_temp_path $sr/proxy_temp;
    fastcgi_temp_path $sr/fastcgi_temp;
    uwsgi_temp_path $sr/uwsgi_temp;
    scgi_temp_path $sr/scgi_temp;
    server {
        listen 127.0.0.1:$port;
        location /t {
            idem on;
            idem_idempotent on;
            idem_retry 3 backoff=10ms max_backoff=5s;
            proxy_pass http://127.0.0.1:$backend/status/503/1/2;
        }
    }
}
CONF
    close $fh;
}

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

sub gone {
    my ($pid, $secs) = @_;
    for (1 .. $secs * 10) {
        return 1 unless kill 0, $pid;
        sleep 0.1;
    }
    return 0;
}

sub call {
    my ($id) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 10)
        // die "connect: $!";
    print $s "POST /t HTTP/1.0\r\nHost: localhost\r\nX-Call-Id: $id\r\n"
             . "Content-Length: 1\r\n\r\nx";
    return $s;
}

sub backend_log {
    my ($id) = @_;
    my $s = IO::Socket::INET->new("127.0.0.1:$backend") // die "backend: $!";
    print $s "GET /log/$id HTTP/1.0\r\nHost: b\r\n\r\n";
    my $res = do { local $/; <$s> } // '';
    $res =~ s/\A.*?\r\n\r\n//s;
    return $res;
}

# worker_shutdown_timeout during the backoff

write_conf('worker_shutdown_timeout 500ms;');
start_nginx();

my $id = "shut-$tag";
my $s = call($id);
sleep 0.5;                      # the first attempt is over, the wait runs

my $master = master();
kill 'QUIT', $master;

ok(gone($master, 5), 'the worker exits at worker_shutdown_timeout');

my $res = do { local $/; <$s> } // '';
unlike($res, qr{^HTTP/1\.\d 200 }, 'the call got no answer from a retry');

sleep 2;                        # past the end of the 2 s wait
like(backend_log($id), qr/\An=1 [^\n]*\n\z/,
     'no attempt after the shutdown');

# a reload during the backoff: the old worker finishes the call

write_conf('');
start_nginx();

$id = "reload-$tag";
$s = call($id);
sleep 0.5;

$master = master();
kill 'HUP', $master;

$res = do { local $/; <$s> } // '';
like($res, qr{^HTTP/1\.\d 200 }, 'the call is answered after the reload');
like($res, qr/^n=1 attempt=1 [^\n]*\nn=2 attempt=2 /m,
     'by its second attempt, after the wait');

# the client leaves during the backoff

$id = "abort-$tag";
$s = call($id);
sleep 0.5;
close $s;
sleep 2.5;                      # past the end of the 2 s wait

like(backend_log($id), qr/\An=1 [^\n]*\n\z/,
     'no attempt after the client left');

$master = master();
kill 'QUIT', $master;
ok(gone($master, 5), 'nginx exits');

my $log = do { local (@ARGV, $/) = "$sr/logs/error.log"; <> } // '';
unlike($log, qr/\[(?:alert|crit|emerg)\]|exited on signal/,
       'no alert, no crash in the error log');

done_testing();
