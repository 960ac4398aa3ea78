# idem_resend_limit's counts are the zone's, not a worker's: two workers
# (reuseport spreads the calls over both) count one client's resends in
# one bucket and one count of running resends.  A reload that keeps the
# zone keeps the counts, a resend still waiting in an old worker included,
# and that worker gives its count back when the resend ends; a reload that
# resizes the zone starts a new one (as nginx does for any zone), and an
# old worker's resend gives back into the old one, harmlessly.
#
# Plain Test::More: this needs a master process, two workers and reloads,
# which are outside the Test::Nginx format.

use strict;
use warnings;
use Test::More;
use IO::Socket::INET;
use POSIX ();

use lib 't/lib';
use IdemRecord;
use IdemNginx;
use IdemWait ();
use IdemBg ();

my $port = IdemNginx::base_port() + 121;
my $redis = $ENV{TEST_NGINX_REDIS_PORT};
my $backend = $ENV{TEST_NGINX_BACKEND_PORT};

plan skip_all => 'needs TEST_NGINX_REDIS_PORT and TEST_NGINX_BACKEND_PORT'
    unless $redis && $backend;

my $ng = IdemNginx->new(name => 'resend', port => $port, workers => 2,
                        worker_connections => 256, log_level => 'debug');

sub write_conf {
    my ($size, $extra) = @_;
    $extra //= '';

    $ng->write_conf(<<"HTTP");
    idem_redis 127.0.0.1:$redis;
    idem_resend_limit_zone \$binary_remote_addr zone=ip:$size rate=1r/m;
    idem_resend_limit_zone \$http_x_api_key zone=keys:$size;
    server {
        listen 127.0.0.1:$port reuseport;
        location /pay {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_call_id_missing reject;
            idem_resend_limit zone=ip burst=3;
            add_header X-Worker \$pid always;
            proxy_pass http://127.0.0.1:$backend/ok;
        }
        location /wait {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_call_id_missing reject;
            idem_dedupe_wait 20s;
            idem_resend_limit zone=keys concurrent=1;
            add_header X-Worker \$pid always;
            proxy_pass http://127.0.0.1:$backend/hold/1;
        }
        location /metrics {
            idem_metrics;
        }
        $extra
    }
HTTP
}

# a POST on a connection of its own: [status, worker pid]
sub call {
    my ($path, $id, $key) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 10) or return [0, 0];
    my $h = $key ? "X-Api-Key: $key\r\n" : '';
    print $s "POST $path HTTP/1.0\r\nHost: localhost\r\nX-Call-Id: $id\r\n"
             . "${h}Content-Length: 3\r\n\r\nx=1";
    local $/;
    my $res = <$s> // '';
    my ($status) = $res =~ m{^HTTP/1\.1 (\d+)};
    my ($pid) = $res =~ m{^X-Worker: (\d+)}mi;
    return [$status // 0, $pid // 0];
}

# until both workers of the configuration before a reload (logged from
# $from on) have stopped taking calls
sub old_workers_quit {
    my ($from) = @_;
    return IdemWait::wait_for('the old workers to stop taking calls', sub {
        my @n = substr($ng->log_text, $from) =~ /gracefully shutting down/g;
        @n >= 2;
    });
}

sub parked { IdemWait::parked($_[0], $ng->error_log) }

# a background call through curl (IdemBg's, at this instance's port)
sub bg {
    my ($name, $id, $path, $key) = @_;
    local $ENV{TEST_NGINX_SERVER_PORT} = $port;
    IdemBg::bg($name, $id, $path, '--data', 'x=1', '-H', "X-Api-Key: $key");
}

END { IdemBg::stop_all() }

system("redis-cli -p $redis flushall >/dev/null");

write_conf('1m');
$ng->start or BAIL_OUT('nginx does not start: ' . $ng->out);

# 1. a rate: one bucket for both workers

# the first call's answer is stored after its client has it (the final
# write): a resend on the other worker before that is 409 call-in-flight
my @r = (call('/pay', 'wk-1'));
ok(IdemWait::wait_for('the answer of wk-1 stored',
       sub { my %f = IdemRecord::fields($redis, 'idem:c:{wk-1}');
             defined $f{r} }),
   'the answer of wk-1 stored');
push @r, map { call('/pay', 'wk-1') } 2 .. 12;

# reuseport hashes each connection to a worker: refused resends more,
# until both workers have answered (8 calls on one worker: 1 in 128)
push @r, call('/pay', 'wk-1')
    while keys %{{ map { $_->[1] => 1 } @r }} < 2 && @r < 64;
my @codes = map { $_->[0] } @r;
my %pids = map { $_->[1] => 1 } @r;

is("@codes", join(' ', 200, (200) x 4, (429) x (@r - 5)),
   'a first call, 4 resends (burst=3 and the first), then refused, '
   . 'whichever worker');
is(scalar keys %pids, 2, 'both workers answered');

# 2. concurrent: a resend waiting in one worker counts in the other

bg('owner', 'wk-2', '/wait', 'o');
ok(IdemWait::wait_for('the owner at the backend',
                      sub { IdemWait::backend_runs('wk-2') >= 1 }),
   'the owner is at the backend');
bg('dup', 'wk-2', '/wait', 'k');
ok(IdemWait::wait_for('a parked resend', sub { parked('wk-2') >= 1 }),
   'a resend of client k waits');

@r = map { call('/wait', 'wk-2', 'k') } 1 .. 8;
push @r, call('/wait', 'wk-2', 'k')
    while keys %{{ map { $_->[1] => 1 } @r }} < 2 && @r < 64;
@codes = map { $_->[0] } @r;
%pids = map { $_->[1] => 1 } @r;
is("@codes", join(' ', (429) x @r), 'client k: its other resends refused');
is(scalar keys %pids, 2, '... by both workers');

# 3. a reload that keeps the zone: the waiting resend still counts

my $from = $ng->log_pos;
write_conf('1m', 'location /kept { return 204; }');
$ng->reload;
ok($ng->wait_log(qr/reconfiguring/, $from), 'reload, the zone kept');
ok(old_workers_quit($from), 'the old workers take no more calls');
ok(IdemWait::wait_for('the new workers',
                      sub { call('/kept', 'x')->[0] == 204 }),
   'the new configuration answers');

is(call('/wait', 'wk-2', 'k')->[0], 429,
   "client k's resend waiting in an old worker still counts");
is(call('/pay', 'wk-1')->[0], 429, "the address's bucket is kept");

# the owner ends: the old worker's waiting resend gets the replay and
# gives its count back to the zone the new workers count in

ok(IdemWait::release('wk-2'), 'the owner let go');
like(IdemBg::done('owner'), qr{^HTTP/1\.1 200 }, 'the owner: 200');
like(IdemBg::done('dup'), qr{^HTTP/1\.1 200 .*Idempotent-Replayed: true}s,
     'the waiting resend: the replay');

is(IdemWait::wait_for('the count given back',
                      sub { my $c = call('/wait', 'wk-2', 'k')->[0];
                            $c == 200 ? $c : undef }, 10), 200,
   "client k's next resend goes through (the replay)");

# 4. a reload that resizes the zones: new zones, counts from zero; a
# resend waiting in an old worker gives back into the old zone

bg('owner3', 'wk-3', '/wait', 'o');
ok(IdemWait::wait_for('the owner at the backend',
                      sub { IdemWait::backend_runs('wk-3') >= 1 }),
   'another owner is at the backend');
bg('dup3', 'wk-3', '/wait', 'k');
ok(IdemWait::wait_for('a parked resend', sub { parked('wk-3') >= 1 }),
   'a resend of client k waits');
is(call('/wait', 'wk-3', 'k')->[0], 429, 'client k: another one refused');

$from = $ng->log_pos;
write_conf('2m', 'location /resized { return 204; }');
$ng->reload;
ok($ng->wait_log(qr/reconfiguring/, $from), 'reload, the zones resized');
ok(old_workers_quit($from), 'the old workers take no more calls');
ok(IdemWait::wait_for('the new workers',
                      sub { call('/resized', 'x')->[0] == 204 }),
   'the new configuration answers');

is(call('/pay', 'wk-1')->[0], 200, 'a new zone: the address resends again');

bg('dup3b', 'wk-3', '/wait', 'k');
ok(IdemWait::wait_for('a second parked resend',
                      sub { parked('wk-3') >= 2 }),
   "client k's resend waits: the old zone's count is not the new one's");

ok(IdemWait::release('wk-3'), 'the owner let go');
like(IdemBg::done('owner3'), qr{^HTTP/1\.1 200 }, 'the owner: 200');
like(IdemBg::done('dup3'), qr{^HTTP/1\.1 200 }, 'the old worker\'s resend: 200');
like(IdemBg::done('dup3b'), qr{^HTTP/1\.1 200 }, 'the new worker\'s: 200');

like(IdemWait::get($port, '/metrics'), qr/^idem_resends_refused_total \d+$/m,
     'the counter is shown');

ok($ng->stop, 'nginx stops');

my $log = $ng->log_text;
unlike($log, qr/\[(?:alert|crit|emerg)\]/, 'no alert in the error log');
unlike($log, qr/exited on signal/, 'no worker crashed');

done_testing();
