# Nothing is lost while Redis is healthy: a few hundred concurrent calls
# give exactly one record each, in the right state, with the right number
# of attempts; and an "nginx -s reload" in the middle of the run loses no
# final state (an exiting worker finishes its writes first).
#
# Plain Test::More: this needs a master process, two workers and clients
# running at once, which is outside the Test::Nginx format.

use strict;
use warnings;
use Test::More;
use IO::Socket::INET;
use Time::HiRes qw(sleep time);

use lib 't/lib';
use IdemNginx;
use IdemWait qw(wait_for);

my $redis = $ENV{TEST_NGINX_REDIS_PORT}
    or plan skip_all => 'TEST_NGINX_REDIS_PORT is not set (use make test)';
my $port = ($ENV{TEST_NGINX_SERVER_PORT} || 1984) + 100;

my $clients = 30;
my $per_client = 10;
my $calls = $clients * $per_client;

my $ng = IdemNginx->new(name => 'load', port => $port, workers => 2,
                        worker_connections => 1024);

$ng->write_conf(<<"HTTP");
    idem_redis 127.0.0.1:$redis;
    idem_key_prefix load:;
    server {
        listen 127.0.0.1:$port;
        location /t {
            idem on;
            idem_record on;
            proxy_pass http://127.0.0.1:$port/back;
        }
        location /back {
            echo_sleep 0.1;
            echo ok;
        }
        location /calls/ {
            idem_status;
        }
    }
HTTP

system("redis-cli -p $redis --scan --pattern 'load:*' "
       . "| xargs -r redis-cli -p $redis del >/dev/null");

ok($ng->start, 'nginx starts')
    or BAIL_OUT('nginx does not start: ' . $ng->out);

sub call {
    my ($id) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 10) or return 0;
    print $s "GET /t HTTP/1.0\r\nHost: localhost\r\nX-Call-Id: $id\r\n\r\n";
    local $/;
    my $res = <$s>;
    return defined $res && $res =~ m{^HTTP/1\.1 200 } ? 1 : 0;
}

my @pids;
for my $c (1 .. $clients) {
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        my $ok = 0;
        $ok += call("load-$c-$_") for 1 .. $per_client;
        exit($ok == $per_client ? 0 : 1);
    }
    push @pids, $pid;
}

sub records {
    my $n = `redis-cli -p $redis --scan --pattern 'load:c:*' | wc -l`;
    return $n + 0;
}

# reload while calls are in flight (a tenth of them recorded, not a fixed
# time that a slow machine spends starting the clients): old workers must
# finish their writes
ok(wait_for('a tenth of the calls recorded',
            sub { records() >= $calls / 10 }),
   'the run is under way');
ok($ng->reload, "reload in the middle of the run");

my $failed = 0;
for my $pid (@pids) {
    waitpid $pid, 0;
    $failed++ if $?;
}
is($failed, 0, "every client got 200 for all its $per_client calls");

my @ids = map { my $c = $_; map { "load-$c-$_" } 1 .. $per_client }
          1 .. $clients;

# the last final writes of the old workers: until every record is in and
# says SUCCESS (or the deadline), then the counts
my ($keys, $success, $one_exec, $one_attempt);

wait_for('every call recorded SUCCESS', sub {
    $keys = records();
    ($success, $one_exec, $one_attempt) = (0, 0, 0);
    return 0 if $keys < $calls;

    # each call, read back through the status endpoint
    for my $id (@ids) {
        my $s = IO::Socket::INET->new("127.0.0.1:$port") or next;
        print $s "GET /calls/$id HTTP/1.0\r\nHost: localhost\r\n\r\n";
        local $/;
        my $res = <$s> // '';
        $success++ if $res =~ /"state":"SUCCESS"/;
        $one_exec++ if $res =~ /"executions":1,/;
        $one_attempt++ if $res =~ /"attempts":\[\{"execution":1,"n":1,[^}]*"outcome":"ok","sent":true,"status":200,[^}]*\}\]/;
    }
    return $success == $calls;
});

is($keys, $calls, "exactly one record per call ($calls)");

is($success, $calls, 'every record is SUCCESS');
is($one_exec, $calls, 'every record has one execution');
is($one_attempt, $calls, 'every record has one attempt, ok, sent, 200');

$ng->stop;

my $log = $ng->log_text;
unlike($log, qr/\[(?:alert|crit|emerg)\]|exited on signal/,
       'no alert, no crash in the error log');
unlike($log, qr/dropped/, 'no write was dropped');

done_testing();
