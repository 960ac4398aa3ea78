# A call waiting out its backoff between two attempts, when the worker
# goes away or the client does:
#   - worker_shutdown_timeout fires during the backoff: no further attempt
#     starts (the worker ends the call and exits);
#   - a reload during the backoff: the old worker finishes the call, the
#     next attempt included;
#   - the client leaves during the backoff: no further attempt (on a
#     dedupe route the owner's call goes on: t/118 TEST 7).
# The backend asks for the wait with Retry-After; its log (util/backend.pl)
# shows what reached it.
#
# Plain Test::More: this needs a master process, signals and a client that
# leaves at a given time, which is outside the Test::Nginx format.

use strict;
use warnings;
use Test::More;
use IO::Socket::INET;
use Time::HiRes qw(sleep time);

use lib 't/lib';
use IdemNginx;

BEGIN {
    plan skip_all => 'TEST_NGINX_BACKEND_PORT is not set (use make test)'
        unless $ENV{TEST_NGINX_BACKEND_PORT};
}

my $backend = $ENV{TEST_NGINX_BACKEND_PORT};
my $port = ($ENV{TEST_NGINX_SERVER_PORT} || 1984) + 150;
my $tag = "$$-" . int(rand(1e9));

# debug: the test waits for the backoff's line, not a fixed time
my $ng = IdemNginx->new(name => 'lifecycle', port => $port,
                        log_level => 'debug');

# until the call's backoff runs (its first attempt over): its log line
# after $from
sub backoff_runs {
    my ($from) = @_;
    ok($ng->wait_log(qr/idem: backoff \d+ ms/, $from, 30),
       'the first attempt is over, the backoff runs');
}

# the first attempt gets a 503 asking for 2 s; max_backoff lets it wait
sub write_conf {
    my ($shutdown) = @_;

    $ng->write_conf(<<"HTTP", main => $shutdown);
    server {
        listen 127.0.0.1:$port;
        location /t {
            idem on;
            idem_idempotent on;
            idem_retry 3 backoff=10ms max_backoff=5s;
            proxy_pass http://127.0.0.1:$backend/status/503/1/2;
        }
    }
HTTP
}

sub start_nginx {
    ok($ng->start, 'nginx starts')
        or BAIL_OUT('nginx does not start: ' . $ng->out);
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
my $from = $ng->log_pos;
my $s = call($id);
backoff_runs($from);

ok($ng->stop(5), 'the worker exits at worker_shutdown_timeout');

my $res = do { local $/; <$s> } // '';
unlike($res, qr{^HTTP/1\.\d 200 }, 'the call got no answer from a retry');

sleep 2;                        # past the end of the 2 s wait: nothing to
                                # wait for when nothing may happen
like(backend_log($id), qr/\An=1 [^\n]*\n\z/,
     'no attempt after the shutdown');

# a reload during the backoff: the old worker finishes the call

write_conf('');
start_nginx();

$id = "reload-$tag";
$from = $ng->log_pos;
$s = call($id);
backoff_runs($from);

$ng->reload;

$res = do { local $/; <$s> } // '';
like($res, qr{^HTTP/1\.\d 200 }, 'the call is answered after the reload');
like($res, qr/^n=1 attempt=1 [^\n]*\nn=2 attempt=2 /m,
     'by its second attempt, after the wait');

# the client leaves during the backoff

$id = "abort-$tag";
$from = $ng->log_pos;
$s = call($id);
backoff_runs($from);
close $s;
sleep 2.5;                      # past the end of the 2 s wait

like(backend_log($id), qr/\An=1 [^\n]*\n\z/,
     'no attempt after the client left');

ok($ng->stop(5), 'nginx exits');

my $log = $ng->log_text;
unlike($log, qr/\[(?:alert|crit|emerg)\]|exited on signal/,
       'no alert, no crash in the error log');

done_testing();
