# A reload that fails leaves the running configuration, and the workers
# the master forks later, as they were: their counters are those of the
# configuration in use, never of the one that failed (issue 9, defect 4).
#
#   1. idem_metrics in use; a reload fails on a directive after it; the
#      worker ends and the master forks another: it still counts, and
#      /metrics answers.
#   2. no idem_metrics in use; a reload that adds it fails at a "listen" on
#      a port already taken (its zone is created, then freed); the worker
#      ends and the master forks another: its first calls must not crash
#      it.
#
# Plain Test::More: this needs a master process and signals to it, which is
# outside the Test::Nginx format.

use strict;
use warnings;
use Test::More;
use IO::Socket::INET;
use Time::HiRes qw(sleep);

use lib 't/lib';
use IdemNginx;

my $port = IdemNginx::base_port() + 75;
my $taken = $port + 1;
my $ng = IdemNginx->new(name => 'reload', port => $port);

sub conf {
    my (%o) = @_;

    my $metrics = $o{metrics} ? "location /metrics { idem_metrics; }" : '';
    my $extra = $o{extra} || '';

    $ng->write_conf(<<"HTTP");
    server {
        listen 127.0.0.1:$port;
        location /t {
            idem on;
            idem_call_id_missing reject;
            return 200 "id=\$idem_call_id\\n";
        }
        $metrics
    }
    $extra
HTTP
}

sub get {
    my ($uri, $headers) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 5) or return '';
    print $s "GET $uri HTTP/1.0\r\nHost: localhost\r\n"
             . ($headers || '') . "\r\n";
    local $/;
    my $res = <$s>;
    return $res // '';
}

sub log_text { $ng->log_text }

sub wait_log { $ng->wait_log(@_) }

# the worker: the master's only child
sub worker_pid {
    my ($master) = @_;
    my ($pid) = $ng->children($master);
    return $pid;
}

# reload to the current conf, which must fail with $emerg in the log
sub failed_reload {
    my ($master, $emerg, $what) = @_;
    my $from = length log_text();
    kill 'HUP', $master;
    ok(wait_log($emerg, $from), "$what: the reload fails");
    sleep 0.2;
}

# end the worker (TERM: it exits, and the master, not told to stop, forks
# another one) and wait for the new one
sub respawn {
    my ($master, $what) = @_;
    my $old = worker_pid($master);
    ok($old && kill('TERM', $old), "$what: worker $old ended");
    my $new;
    for (1 .. 100) {
        $new = worker_pid($master);
        last if $new && $new != $old;
        sleep 0.1;
    }
    ok($new && $new != $old, "$what: the master forked worker "
                             . ($new // 'none'));
    $ng->wait_port(undef, 5);
    return $new;
}

# 1. idem_metrics in use, a reload that fails after it was parsed

conf(metrics => 1);
ok($ng->start, 'nginx starts')
    or BAIL_OUT('nginx does not start: ' . $ng->out);

my $master = $ng->master;

like(get('/t', "X-Call-Id: r-1\r\n"), qr{^HTTP/1\.1 200 .*id=r-1}s,
     'a call');
like(get('/metrics'), qr/^idem_calls_total 1$/m, 'counted');

conf(metrics => 1, extra => 'idem_no_such_directive on;');
failed_reload($master, qr/\[emerg\].*unknown directive "idem_no_such/,
              'bad directive');

my $worker = respawn($master, 'bad directive');

like(get('/t', "X-Call-Id: r-2\r\n"), qr{^HTTP/1\.1 200 .*id=r-2}s,
     'bad directive: the new worker answers a call');
like(get('/metrics'), qr{^HTTP/1\.1 200 .*^idem_calls_total 2$}ms,
     'bad directive: it still counts, and shows the counters');
ok(kill(0, $worker), 'bad directive: the worker is alive');

# 2. no idem_metrics in use, a reload that adds it and fails at "listen"

conf(metrics => 0);
my $from = length log_text();
my $before = worker_pid($master);
kill 'HUP', $master;
ok(wait_log(qr/reconfiguring/, $from), 'reload without idem_metrics');

# the reload is over when the worker of the old configuration is gone
# (a loaded machine can take seconds to get there): until then it may
# still answer with the old configuration
for (1 .. 200) {
    my $now = worker_pid($master);
    last if $now && $now != $before && !kill(0, $before);
    sleep 0.1;
}
my $res = get('/metrics');
like($res, qr{^HTTP/1\.1 404 }, 'no idem_metrics in use')
    or diag("the answer: ", substr($res, 0, 200), "\nthe log since the ",
            "reload:\n", substr(log_text(), $from));

my $blocker = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$taken",
                                    Listen => 1, ReuseAddr => 1)
    or BAIL_OUT("cannot listen on $taken: $!");

conf(metrics => 1,
     extra => "server { listen 127.0.0.1:$taken; return 204; }");
failed_reload($master, qr/still could not bind\(\)/, 'port taken');

close $blocker;

$worker = respawn($master, 'port taken');

for my $n (3 .. 5) {
    like(get('/t', "X-Call-Id: r-$n\r\n"), qr{^HTTP/1\.1 200 .*id=r-$n}s,
         "port taken: call $n answered");
}
like(get('/t'), qr{^HTTP/1\.1 400 .*missing-call-id}s,
     'port taken: a rejection (counted where counters exist) answered');
ok(kill(0, $worker), 'port taken: the worker is alive');

$ng->stop;

my $log = log_text();
unlike($log, qr/exited on signal|\[alert\]|\[crit\]/,
       'no worker crashed, no alert');

done_testing();
