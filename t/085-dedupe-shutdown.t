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
use Time::HiRes qw(sleep);

BEGIN {
    plan skip_all => 'TEST_NGINX_REDIS_FAULT_PORT is not set (use make test)'
        unless $ENV{TEST_NGINX_REDIS_FAULT_PORT}
               && $ENV{TEST_NGINX_BACKEND_PORT};
}

use lib 't/lib';
use IdemRecord;
use RedisFault;
use IdemNginx;

my $redis = $ENV{TEST_NGINX_REDIS_FAULT_PORT};
my $backend = $ENV{TEST_NGINX_BACKEND_PORT};
my $port = ($ENV{TEST_NGINX_SERVER_PORT} || 1984) + 85;
my $id = "shut-$$-" . int(rand(1e9));

END {
    local $?;
    RedisFault::stop();
}

RedisFault::start();

# debug: the test waits for the claim's and the shutdown timeout's lines
my $ng = IdemNginx->new(name => 'shutdown', port => $port, log_level => 'debug',
                        main => 'worker_shutdown_timeout 300ms;');

$ng->write_conf(<<"HTTP");
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
HTTP

sub start_nginx {
    ok($ng->start, 'nginx starts')
        or BAIL_OUT('nginx does not start: ' . $ng->out);
}

sub post {
    return IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Timeout => 10)
        // die "connect: $!";
}

start_nginx();

# the request's claim waits in the paused Redis; the worker ends it

RedisFault::pause();

my $from = $ng->log_pos;
my $s = post();
print $s "POST /d HTTP/1.0\r\nHost: localhost\r\nX-Call-Id: $id\r\n"
         . "Content-Length: 1\r\n\r\nx";
ok($ng->wait_log(qr/idem dedupe: claim of "[^"]*\Q$id\E[^"]*" sent/, $from, 30),
   'the claim is sent to the paused Redis');

my $master = $ng->master;
$ng->quit;
ok($ng->wait_log(qr/shutdown timeout/, $from, 30),
   'worker_shutdown_timeout ends the request');

RedisFault::resume();           # the claim, then its release, run now

ok($ng->gone(15, $master), 'the old master and worker exit');

{
    local $/;
    my $res = <$s> // '';
    unlike($res, qr{^HTTP/1\.\d 200 }, 'the parked request got no answer '
                                       . 'from the upstream');
}

my %k = IdemRecord::fields($redis, "idem:c:{$id}");
ok(defined $k{o}, 'the claim was made');
ok(scalar(grep { /^k:[0-9a-f]{16}$/ && $k{$_} eq 'F' } keys %k),
   'and released by the final write');

# the same call again, on a new nginx: it runs

start_nginx();

$s = post();
print $s "POST /d HTTP/1.0\r\nHost: localhost\r\nX-Call-Id: $id\r\n"
         . "Content-Length: 1\r\n\r\nx";
my $res = do { local $/; <$s> } // '';

like($res, qr{^HTTP/1\.1 200 }, 'the call sent again is forwarded');
unlike($res, qr/call-in-flight/, 'not a 409 in flight');
like($res, qr/^n=1 /m, 'the backend runs it for the first time');

ok($ng->stop(15), 'nginx exits');

my $log = $ng->log_text;
unlike($log, qr/\[(?:alert|crit|emerg)\]|exited on signal/,
       'no alert, no crash in the error log');

done_testing();
