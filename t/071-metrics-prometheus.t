# idem_metrics for Prometheus: the histograms (a call's duration by its
# final state, a dedupe claim's round trip, a waiting duplicate's wait by
# how it ended), the gauges of what each worker knows (its Redis
# connections, its waiting duplicates) added up over two workers, and
# promtool on all of it:
#
#   1. calls of known durations and ends, two waiting duplicates, a
#      duplicate parked now: each series with its value; the Redis node up
#      in both workers; the UNKNOWN owner counted by
#      idem_unknown_unresolved, its stream read at most once every
#      unknown_interval however often the two workers are scraped;
#   2. "promtool check metrics" on that output, every series present;
#   3. a gateway whose Redis is down: idem_redis_up 0, no worker connected;
#      the connects counted (idem_redis_connects_total, and
#      idem_redis_connect_failures_total by reason): a Redis down, then up,
#      then restarted; AUTH refused; a name that does not resolve;
#   4. the shipped rules (conf-examples/prometheus/idem-rules.yml):
#      "promtool check rules", "promtool test rules" against synthetic
#      series (t/data/prometheus/idem-rules.test.yml), and every series a
#      rule reads is one the endpoint shows.
#
# Plain Test::More: two workers, a second gateway and promtool are
# outside the Test::Nginx format.  Without promtool (Debian's prometheus
# package, which util/deps.sh installs for make test) its checks are
# skipped, the rest runs.

use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use IO::Socket::INET;
use POSIX ();
use Time::HiRes qw(time);

# the suite's DNS server (section 3b), its map empty: every name NXDOMAIN
our $Map;

BEGIN {
    $Map = "/tmp/idem-dns-map-071-" . ($ENV{TEST_NGINX_BACKEND_PORT} // 0);
    $IdemDns::Map = $Map;
    open my $fh, '>', $Map or die "$Map: $!";
    close $fh;
}

END { unlink $Map if defined $Map }

use lib 't/lib';
use IdemDns;
use IdemNginx;
use IdemWait qw(wait_for);

my $port = IdemNginx::base_port() + 71;
my $down_port = $port + 1;
my $backend = $ENV{TEST_NGINX_BACKEND_PORT};
my $redis = $ENV{TEST_NGINX_REDIS_PORT};
my $root = IdemNginx::root();
my $tmp = tempdir(CLEANUP => 1);

my $promtool = `sh -c 'command -v promtool' 2>/dev/null`;
chomp $promtool;

my $ng = IdemNginx->new(name => 'prom', port => $port, workers => 2);

$ng->write_conf(<<"HTTP", log_level => 'debug');
    idem_redis 127.0.0.1:$redis;

    server {
        listen 127.0.0.1:$port;

        idem on;
        idem_call_id_missing reject;
        idem_unknown_stream prom-071;

        location /ok {
            idem_breaker;
            proxy_pass http://127.0.0.1:$backend/ok;
        }
        location /slow {
            proxy_pass http://127.0.0.1:$backend/sleep/300/1;
        }
        location /fail {
            proxy_pass http://127.0.0.1:$backend/status/500/1;
        }
        location /lost {
            proxy_read_timeout 200ms;
            proxy_pass http://127.0.0.1:$backend/sleep/3000/1;
        }
        location /pay {
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_dedupe_wait 20s;
            proxy_pass http://127.0.0.1:$backend/hold/1;
        }
        location /pay-short {
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_dedupe_wait 300ms;
            proxy_pass http://127.0.0.1:$backend/hold/1;
        }
        location /pay-lost {
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_dedupe_wait 20s;
            proxy_read_timeout 3s;
            proxy_pass http://127.0.0.1:$backend/hold/1;
        }
        location /durable {
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_dedupe_durable replicas=1 timeout=100ms;
            proxy_pass http://127.0.0.1:$backend/ok;
        }
        location /metrics {
            idem_metrics unknown_interval=500ms;
        }
    }
HTTP

$ng->start or BAIL_OUT('nginx does not start: ' . $ng->out);
my $started = time;

sub request {
    my ($p, $method, $path, $id, $timeout) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$p",
                                  Timeout => $timeout || 10) or return '';
    my $body = $method eq 'POST' ? 'x=1' : '';
    print $s "$method $path HTTP/1.0\r\nHost: localhost\r\n"
             . ($id ? "X-Call-Id: $id\r\n" : '')
             . ($method eq 'POST' ? "Content-Length: 3\r\n" : '')
             . "\r\n$body";
    local $/;
    my $res = <$s>;
    return $res // '';
}

sub scrape {
    my ($p) = @_;
    my $res = request($p || $port, 'GET', '/metrics');
    return $res =~ /\r\n\r\n(.*)\z/s ? $1 : '';
}

# a series' value in a scrape (its name and labels as written)
sub value {
    my ($text, $series) = @_;
    return $text =~ /^\Q$series\E (\S+)$/m ? $1 : undef;
}

# a call in the background: its answer goes to a file of $tmp
my %bg;

sub bg {
    my ($name, @args) = @_;
    my $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        my $res = request($port, @args, 30);
        open my $fh, '>', "$tmp/$name" or POSIX::_exit(1);
        print $fh $res;
        close $fh;
        POSIX::_exit(0);
    }
    $bg{$name} = $pid;
}

sub done {
    my ($name) = @_;
    waitpid($bg{$name}, 0);
    open my $fh, '<', "$tmp/$name" or return '';
    local $/;
    return <$fh> // '';
}


# 1. calls of known ends and durations

like(request($port, 'GET', '/ok', 'h-ok-1'), qr/^HTTP\/1.1 200/, 'a call: 200');
like(request($port, 'GET', '/ok', 'h-ok-2'), qr/^HTTP\/1.1 200/, 'a call: 200');

my $t0 = time;
like(request($port, 'GET', '/slow', 'h-slow'), qr/^HTTP\/1.1 200/,
     'a call of 300 ms: 200');
my $slow = time - $t0;

like(request($port, 'GET', '/fail', 'h-fail'), qr/^HTTP\/1.1 500/,
     'a call the service failed: 500');
like(request($port, 'GET', '/lost', 'h-lost'), qr/^HTTP\/1.1 504/,
     'a call sent, no answer in time: 504');

# each counted at its log phase, which may come after its answer

my $m;
ok(wait_for('the five calls counted',
            sub {
                $m = scrape();
                (value($m, 'idem_call_duration_seconds_count{state="SUCCESS"}')
                 // 0) >= 3
                && (value($m, 'idem_call_duration_seconds_count{state="UNKNOWN"}')
                    // 0) >= 1
            }),
   'the five calls counted');

is(value($m, 'idem_call_duration_seconds_count{state="FAILED"}'), 1,
   'FAILED: the 500');

# the call of 300 ms: in no bucket of 0.25 s or less; the UNKNOWN one
# (200 ms read timeout) in none of 0.1 s or less

is(value($m, 'idem_call_duration_seconds_bucket{state="SUCCESS",le="0.25"}'),
   2, 'the 300 ms call is not in le="0.25"');
is(value($m, 'idem_call_duration_seconds_bucket{state="SUCCESS",le="+Inf"}'),
   3, 'all three in le="+Inf"');
my $le = $slow < 0.5 ? '0.5' : $slow < 1 ? '1' : '2.5';
is(value($m, qq{idem_call_duration_seconds_bucket{state="SUCCESS",le="$le"}}),
   3, "the 300 ms call ($slow s here) is in le=\"$le\"");
is(value($m, 'idem_call_duration_seconds_bucket{state="UNKNOWN",le="0.1"}'),
   0, 'the UNKNOWN call (200 ms timeout) is not in le="0.1"');
# a duplicate that waits for its owner, and is answered with its answer

bg('owner', 'POST', '/pay', 'h-pay-1');
ok(wait_for('the owner at the backend',
            sub { IdemWait::backend_runs('h-pay-1') >= 1 }),
   'the owner reached the backend');

bg('dup', 'POST', '/pay', 'h-pay-1');

ok(wait_for('the duplicate parked (idem_dedupe_waiters 1)',
            sub { (value(scrape(), 'idem_dedupe_waiters') // -1) == 1 }),
   'idem_dedupe_waiters 1 while the duplicate waits, in either worker');

ok(IdemWait::release('h-pay-1'), 'the owner released');
like(done('owner'), qr/^HTTP\/1.1 200/, 'the owner: 200');
like(done('dup'), qr/^HTTP\/1.1 200.*Idempotent-Replayed: true/s,
     'the duplicate: its answer replayed');

# a duplicate whose wait runs out

bg('owner2', 'POST', '/pay-short', 'h-pay-2');
ok(wait_for('the second owner at the backend',
            sub { IdemWait::backend_runs('h-pay-2') >= 1 }),
   'the second owner reached the backend');
like(request($port, 'POST', '/pay-short', 'h-pay-2'), qr/^HTTP\/1.1 409/,
     'its duplicate waited 300 ms: 409, still in flight');
ok(IdemWait::release('h-pay-2'), 'the second owner released');
like(done('owner2'), qr/^HTTP\/1.1 200/, 'the second owner: 200');

# the owners' final write comes after their answer (log phase)

ok(wait_for('both owners counted',
            sub {
                $m = scrape();
                (value($m, 'idem_call_duration_seconds_count{state="SUCCESS"}')
                 // 0) >= 5
            }),
   'the owners counted once their requests ended');

is(value($m, 'idem_call_duration_seconds_count{state="SUCCESS"}'), 5,
   'SUCCESS: 2 fast, 1 slow, 2 owners (not the replayed duplicate)');
is(value($m, 'idem_call_duration_seconds_count{state="FAILED"}'), 1,
   'FAILED: the 500');
is(value($m, 'idem_call_duration_seconds_count{state="UNKNOWN"}'), 1,
   'UNKNOWN: the call that timed out');

cmp_ok(value($m, 'idem_call_duration_seconds_sum{state="SUCCESS"}'), '>=',
       0.3, 'the sum of SUCCESS is at least the 300 ms call');
like(value($m, 'idem_call_duration_seconds_sum{state="SUCCESS"}'),
     qr/^\d+\.\d{6}$/, 'the sum in seconds, to the µs');

# claims: the two owners', the two duplicates' first ones, the first
# duplicate's once woken, and more if a waiter asked again on its own

cmp_ok(value($m, 'idem_dedupe_claim_duration_seconds_count{durable="false"}'),
       '>=', 5, 'the claims counted, not durable');
is(value($m, 'idem_dedupe_claim_duration_seconds_count{durable="true"}'),
   0, 'no durable claim yet');
is(value($m, 'idem_dedupe_claim_duration_seconds_bucket{durable="false",'
             . 'le="+Inf"}'),
   value($m, 'idem_dedupe_claim_duration_seconds_count{durable="false"}'),
   'count is the +Inf bucket');

# waits

is(value($m, 'idem_dedupe_wait_duration_seconds_count{result="replayed"}'),
   1, 'a wait ended by the answer replayed');
is(value($m, 'idem_dedupe_wait_duration_seconds_count{result="timed_out"}'),
   1, 'a wait that ran out');
is(value($m, 'idem_dedupe_wait_duration_seconds_bucket{result="timed_out",'
             . 'le="0.25"}'),
   0, 'the wait of 300 ms is not in le="0.25"');
is(value($m, 'idem_dedupe_wait_duration_seconds_count{result="ran"}'), 0,
   'no waiter ran the call');
is(value($m, 'idem_dedupe_waiters'), 0, 'no duplicate waits now');

# a duplicate whose client goes while it waits

{
    bg('owner3', 'POST', '/pay', 'h-pay-3');
    ok(wait_for('the third owner at the backend',
                sub { IdemWait::backend_runs('h-pay-3') >= 1 }),
       'the third owner reached the backend');

    # made after the fork: no child holds it open
    my $c = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Timeout => 5)
        or die "connect: $!";
    print $c "POST /pay HTTP/1.0\r\nHost: localhost\r\nX-Call-Id: h-pay-3\r\n"
             . "Content-Length: 3\r\n\r\nx=1";
    ok(wait_for('its duplicate parked',
                sub { (value(scrape(), 'idem_dedupe_waiters') // -1) == 1 }),
       'its duplicate waits');
    close $c;
    ok(wait_for('the wait ended with the client',
                sub {
                    $m = scrape();
                    (value($m, 'idem_dedupe_wait_duration_seconds_count{result="client_gone"}')
                     // 0) == 1
                }),
       'a wait ended by its client gone: result="client_gone"');
    is(value($m, 'idem_dedupe_waiters'), 0, 'nobody waits any more');
    ok(IdemWait::release('h-pay-3'), 'the third owner released');
    like(done('owner3'), qr/^HTTP\/1.1 200/, 'the third owner: 200');
}

# a duplicate waiting for an owner that ends UNKNOWN (no answer in 3 s):
# 409, the outcome is not known

bg('owner4', 'POST', '/pay-lost', 'h-pay-4');
ok(wait_for('the fourth owner at the backend',
            sub { IdemWait::backend_runs('h-pay-4') >= 1 }),
   'the fourth owner reached the backend');
like(request($port, 'POST', '/pay-lost', 'h-pay-4', 30), qr/^HTTP\/1.1 409/,
     'its duplicate waited, then got 409');
like(done('owner4'), qr/^HTTP\/1.1 504/, 'the fourth owner: 504');
ok(IdemWait::release('h-pay-4'), 'the held request let go');
ok(wait_for('the conflict counted',
            sub {
                $m = scrape();
                (value($m, 'idem_dedupe_wait_duration_seconds_count{result="conflict"}')
                 // 0) == 1
            }),
   'a wait ended by a 409: result="conflict"');
is(value($m, 'idem_dedupe_wait_duration_seconds_bucket{result="conflict",'
             . 'le="2.5"}'),
   0, 'it waited for the owner\'s 3 s: in no bucket of 2.5 s or less');

# waits are timed in µs, as calls are: of the waits' sums (replayed,
# timed_out, client_gone, conflict), not all whole milliseconds (each is
# one by chance once in a thousand)
{
    my @sums = grep { defined && $_ > 0 }
               map { value($m, "idem_dedupe_wait_duration_seconds_sum{result=\"$_\"}") }
               qw(replayed timed_out client_gone conflict);
    cmp_ok(scalar @sums, '>=', 3, 'at least three kinds of waits timed');
    ok((grep { !/\.\d{3}000$/ } @sums), 'wait sums in µs: ' . join(' ', @sums));
}

# a durable claim no replica confirms (the test's Redis has none): its
# WAIT runs out after 100 ms, the call is refused 503

like(request($port, 'POST', '/durable', 'h-durable'), qr/^HTTP\/1.1 503/,
     'a durable claim not confirmed: 503');
ok(wait_for('the durable claim counted',
            sub {
                $m = scrape();
                (value($m, 'idem_dedupe_claim_duration_seconds_count{durable="true"}')
                 // 0) >= 1
            }),
   'a durable claim counted');
is(value($m, 'idem_dedupe_claim_duration_seconds_count{durable="true"}'), 1,
   'one durable claim');
is(value($m, 'idem_dedupe_claim_duration_seconds_bucket{durable="true",'
             . 'le="0.05"}'),
   0, 'its WAIT of 100 ms included: in no bucket of 0.05 s or less');
is(value($m, 'idem_dedupe_total{result="not_durable"}'), 1,
   'idem_dedupe_total{result="not_durable"} 1');

# the Redis node, in both workers

ok(wait_for('both workers connected to Redis',
            sub {
                (value(scrape(), qq{idem_redis_connections{node="127.0.0.1:$redis",role="data"}})
                 // 0) == 2
            }),
   'idem_redis_connections 2: both workers are connected');
$m = scrape();
is(value($m, qq{idem_redis_up{node="127.0.0.1:$redis",role="data"}}), 1,
   'idem_redis_up 1');

# the owner that ended UNKNOWN on a dedupe route (h-pay-4, in its record
# and its stream; /lost has no record): idem_unknown_unresolved counts it;
# however often both workers are scraped, the stream is read at most once
# every unknown_interval (500 ms), by one of them

ok(wait_for('idem_unknown_unresolved 1',
            sub {
                (value(scrape(), 'idem_unknown_unresolved{stream="prom-071"}')
                 // -1) == 1
            }),
   'idem_unknown_unresolved{stream="prom-071"} 1: h-pay-4');
scrape() for 1 .. 50;
$m = scrape();
{
    my $spent = time - $started;
    my $reads = () = $ng->log_text =~ /idem metrics: reading "prom-071"/g;
    ok($reads >= 1 && $reads <= int($spent / 0.5) + 1,
       "$reads reads of the stream in $spent s of scrapes: at most one "
       . "every 500 ms");
}
like(value($m, 'idem_unknown_unresolved_age_seconds{stream="prom-071"}'),
     qr/^\d+\.\d{3}$/, 'the age of that count, in seconds');
is(value($m, 'idem_unknown_unresolved_truncated{stream="prom-071"}'), 0,
   'the stream read whole');


# 2. promtool check metrics

my @series = qw(idem_call_duration_seconds idem_dedupe_claim_duration_seconds
                idem_dedupe_wait_duration_seconds idem_dedupe_waiters
                idem_redis_up idem_redis_connections idem_calls_total
                idem_redis_connects_total idem_redis_connect_failures_total
                idem_breaker_state idem_unknown_unresolved
                idem_unknown_unresolved_age_seconds
                idem_unknown_unresolved_truncated);

for my $name (@series) {
    like($m, qr/^# TYPE \Q$name\E (?:counter|gauge|histogram)$/m,
         "$name has its TYPE line");
}

for my $r (qw(replayed ran conflict unavailable timed_out client_gone)) {
    like($m, qr/^idem_dedupe_wait_duration_seconds_count\{result="$r"\} \d+$/m,
         "the wait result $r is shown, at zero or more");
}

SKIP: {
    skip 'no promtool (Debian package prometheus)', 2 unless $promtool;

    open my $fh, '>', "$tmp/metrics.txt" or die "$tmp/metrics.txt: $!";
    print $fh $m;
    close $fh;

    my $out = `$promtool check metrics < $tmp/metrics.txt 2>&1`;
    is($?, 0, 'promtool check metrics: exit 0') or diag($out);
    is($out, '', 'promtool check metrics: nothing to say') or diag($out);
}

my $full = $m;

ok($ng->stop, 'the gateway stops');
unlike($ng->log_text, qr/\[(?:alert|crit|emerg)\]/, 'no alert in its log');


# 3. Redis down: a node no worker is connected to

my $closed = $down_port + 1;
my $ng2 = IdemNginx->new(name => 'prom-down', port => $down_port, workers => 2);

$ng2->write_conf(<<"HTTP");
    idem_redis 127.0.0.1:$closed connect_timeout=100ms;

    server {
        listen 127.0.0.1:$down_port;
        location /metrics {
            idem_metrics;
        }
    }
HTTP

$ng2->start or BAIL_OUT('nginx does not start: ' . $ng2->out);

ok(wait_for('both workers publish the node',
            sub {
                defined value(scrape($down_port),
                              qq{idem_redis_up{node="127.0.0.1:$closed",role="data"}})
            }),
   'the node is shown');
$m = scrape($down_port);
is(value($m, qq{idem_redis_up{node="127.0.0.1:$closed",role="data"}}), 0,
   'idem_redis_up 0: Redis is down');
is(value($m, qq{idem_redis_connections{node="127.0.0.1:$closed",role="data"}}),
   0, 'idem_redis_connections 0');

ok($ng2->stop, 'the second gateway stops');


# 3b. the connects counted, per node: a Redis down then up, then
# restarted (one worker: connects 1, then 2); AUTH refused; a name that
# does not resolve (the suite's DNS server, its map empty: NXDOMAIN)

my $cport = $down_port + 2;
my $credis = $down_port + 3;
my $cdir = "$tmp/redis-$credis";
mkdir $cdir or die "$cdir: $!";

sub start_credis {
    system("redis-server --bind 127.0.0.1 --port $credis --save ''"
           . " --appendonly no --dir $cdir --daemonize yes"
           . " --pidfile $cdir/redis.pid --logfile $cdir/redis.log") == 0
        or die "cannot start redis-server on $credis\n";
    wait_for("redis on $credis", sub {
        `redis-cli -p $credis ping 2>&1` =~ /PONG/ });
}

END { system("redis-cli -p $credis shutdown nosave >/dev/null 2>&1")
          if defined $credis }

# the gateway's counters once $check holds for them (or the last scrape)
sub counted {
    my ($p, $what, $check) = @_;
    my $m;
    wait_for($what, sub { $m = scrape($p); $check->($m) });
    return $m;
}

my $ng3 = IdemNginx->new(name => 'prom-connects', port => $cport,
                         workers => 1);

$ng3->write_conf(<<"HTTP");
    idem_redis 127.0.0.1:$credis connect_timeout=100ms;

    server {
        listen 127.0.0.1:$cport;
        location /metrics {
            idem_metrics;
        }
    }
HTTP

$ng3->start or BAIL_OUT('nginx does not start: ' . $ng3->out);

my $cnode = qq{node="127.0.0.1:$credis",role="data"};
my $fail = sub { qq{idem_redis_connect_failures_total{$cnode,reason="$_[0]"}} };

$m = counted($cport, 'a refused connect counted',
             sub { (value($_[0], $fail->('connect')) // 0) >= 1 });
cmp_ok(value($m, $fail->('connect')) // 0, '>=', 1,
       'Redis down: its refused connects counted (reason="connect")');
is(value($m, "idem_redis_connects_total{$cnode}"), 0,
   'no connection made yet');
is(value($m, $fail->($_)), 0, "none for reason=\"$_\"")
    for qw(resolve auth readonly);

start_credis();
$m = counted($cport, 'a connection made',
             sub { (value($_[0], "idem_redis_connects_total{$cnode}") // 0)
                   >= 1 });
is(value($m, "idem_redis_connects_total{$cnode}"), 1,
   'Redis up: idem_redis_connects_total 1');

system("redis-cli -p $credis shutdown nosave >/dev/null 2>&1");
start_credis();
$m = counted($cport, 'connected again',
             sub { (value($_[0], "idem_redis_connects_total{$cnode}") // 0)
                   >= 2 });
is(value($m, "idem_redis_connects_total{$cnode}"), 2,
   'Redis restarted: idem_redis_connects_total 2');
like($m, qr/^# TYPE idem_redis_connects_total counter$/m,
     'idem_redis_connects_total is a counter');
like($m, qr/^# TYPE idem_redis_connect_failures_total counter$/m,
     'idem_redis_connect_failures_total is a counter');

ok($ng3->stop, 'the gateway stops');

# AUTH refused: the suite's Redis has no password

$ng3->write_conf(<<"HTTP");
    idem_redis 127.0.0.1:$redis password=wrong;

    server {
        listen 127.0.0.1:$cport;
        location /metrics {
            idem_metrics;
        }
    }
HTTP

$ng3->start or BAIL_OUT('nginx does not start: ' . $ng3->out);

$cnode = qq{node="127.0.0.1:$redis",role="data"};
$m = counted($cport, 'AUTH refused, counted',
             sub { (value($_[0], $fail->('auth')) // 0) >= 1 });
cmp_ok(value($m, $fail->('auth')) // 0, '>=', 1,
       'AUTH refused: counted (reason="auth")');
cmp_ok(value($m, "idem_redis_connects_total{$cnode}") // 0, '>=', 1,
       'each after a connection made');

ok($ng3->stop, 'the gateway stops');

# a host name that does not resolve

$ng3->write_conf(<<"HTTP");
    resolver 127.0.0.1:$IdemDns::Port valid=1s;
    idem_redis nosuch.idem.test:$redis;

    server {
        listen 127.0.0.1:$cport;
        location /metrics {
            idem_metrics;
        }
    }
HTTP

$ng3->start or BAIL_OUT('nginx does not start: ' . $ng3->out);

$cnode = qq{node="nosuch.idem.test:$redis",role="data"};
$m = counted($cport, 'the name that does not resolve, counted',
             sub { (value($_[0], $fail->('resolve')) // 0) >= 1 });
cmp_ok(value($m, $fail->('resolve')) // 0, '>=', 1,
       'a name that does not resolve: counted (reason="resolve")');
is(value($m, $fail->('connect')), 0, 'not as a refused connect');
is(value($m, "idem_redis_connects_total{$cnode}"), 0,
   'no connection made');

ok($ng3->stop, 'the gateway stops');


# 4. the shipped rules

my $rules = "$root/conf-examples/prometheus/idem-rules.yml";
my $rules_test = "$root/t/data/prometheus/idem-rules.test.yml";

ok(-f $rules, 'conf-examples/prometheus/idem-rules.yml is there');

# every series a rule reads is one the endpoint shows (a histogram's
# _bucket, _sum and _count by its name)

{
    open my $fh, '<', $rules or die "$rules: $!";
    local $/;
    my $text = <$fh>;
    $text =~ s/^\s*#.*$//mg;     # comments name directives too
    my %read = map { $_ => 1 } $text =~ /\b(idem_[a-z0-9_]+)/g;
    my %shown = map { $_ => 1 } $full =~ /^# TYPE (\S+)/mg;
    ok(scalar keys %read >= 6, 'the rules read ' . join(' ', sort keys %read));
    for my $name (sort keys %read) {
        (my $base = $name) =~ s/_(?:bucket|sum|count)$//;
        ok($shown{$name} || $shown{$base},
           "the rules read $name, a series the module shows");
    }
}

# every alert's runbook_url is absolute (Alertmanager and Grafana show it
# as is: a relative path is a broken link), under the one base that
# docs/operating.md's sed line replaces, its anchor one of that page's
# sections, the alert's own

{
    open my $fh, '<', $rules or die "$rules: $!";
    local $/;
    my $text = <$fh>;
    my $doc = do {
        open my $d, '<', "$root/docs/operating.md" or die "operating.md: $!";
        <$d>;
    };
    my %heading = map { lc($_) => 1 } $doc =~ /^### (Idem\w+)$/mg;
    my (@alerts, $alert);
    for (split /\n/, $text) {
        $alert = $1 if /^\s*- alert: (\w+)/;
        push @alerts, $alert, $1 if /^\s*runbook_url:\s*"([^"]*)"/;
    }
    my $count = () = $text =~ /^\s*- alert:/mg;
    is(scalar @alerts / 2, $count, 'every alert has a runbook_url');
    my $base = 'https://idem-docs.invalid/';
    like($doc, qr{^\s*sed -i 's\|\Q$base\E\|}m,
         "docs/operating.md: the one line that replaces $base");
    while (my ($alert, $url) = splice @alerts, 0, 2) {
        is($url, $base . 'operating.md#' . lc($alert),
           "$alert: runbook_url absolute, under the one base");
        ok($heading{lc $alert}, "$alert: operating.md has its section");
    }
}

SKIP: {
    skip 'no promtool (Debian package prometheus)', 4 unless $promtool;

    my $out = `$promtool check rules $rules 2>&1`;
    is($?, 0, 'promtool check rules: exit 0') or diag($out);
    like($out, qr/SUCCESS: \d+ rules found/, 'promtool check rules: SUCCESS')
        or diag($out);

    # promtool test rules reads rule_files relative to the test file
    $out = `cd $root/t/data/prometheus && $promtool test rules $rules_test 2>&1`;
    is($?, 0, 'promtool test rules: exit 0') or diag($out);
    like($out, qr/SUCCESS/, 'promtool test rules: SUCCESS') or diag($out);
}

done_testing();
