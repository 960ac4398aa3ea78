# Record writes given up, counted (issue 52): every write the store gives
# up is in idem_record_writes_total{result="dropped"} once, whatever the
# reason: held while Redis is stopped until it outlived its timeout, not
# taken (too many held), sent and lost with the connection before its
# answer (Redis paused, then killed), refused by Redis (out of memory).
# Each block compares the counter with the calls that left no record in
# Redis (IdemRecord), read once Redis is back.  A call on /r is over at
# once, and idem_record_arrival_delay 10s makes its record one write (a
# short record's SET); a call on /slow writes twice (its arrival, HSET
# and PEXPIRE, then its end), each write counted once, not per command.
#
# A Redis of the tests' own (t/lib/RedisFault.pm), stopped, paused,
# killed and started again.

use lib 't/lib';
use IdemRecord;
use IdemWait ();
use IdemPaths ();
use RedisFault;
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): the blocks read the counters exactly, and stop and
# start Redis in a set order.

our $Fault = $ENV{TEST_NGINX_REDIS_FAULT_PORT};

sub redis {
    my $out = `redis-cli -p $Fault @_`;
    chomp $out;
    return $out;
}

# nginx connected to the Redis, started (empty) if it was not
sub up {
    my $re = qr/idem: redis "[^"]*": connected/;
    if (RedisFault::pid()) {
        IdemWait::log_ok('nginx is connected to Redis', $re);
    } else {
        IdemWait::log_after('nginx is connected to Redis', $re,
                            \&RedisFault::start);
    }
    redis('flushall');
}

# the sum of the counts "<n> $what" in the report lines of the error log
sub reported {
    my ($what) = @_;
    open my $fh, '<', IdemPaths::error_log() or return 0;
    my $n = 0;
    while (<$fh>) {
        $n += $1 while /since the last report: .*?\b(\d+) \Q$what\E/g;
    }
    return $n;
}

sub lost {
    my ($change) = @_;
    IdemWait::log_after('nginx saw the connection to Redis go',
                        qr/idem: redis "[^"]*": connection (?:lost|closed)/,
                        $change);
}

# a GET of $path under each of @ids, one after the other: how many got 200
sub calls {
    my ($path, @ids) = @_;
    my $ok = 0;
    for my $id (@ids) {
        my $res = `curl -s -i --noproxy '*' --max-time 10 -H 'X-Call-Id: $id' http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}$path`;
        $ok++ if $res =~ m{^HTTP/1.1 200 };
    }
    return $ok;
}

# how many of @ids have no record in Redis
sub missing {
    my (@ids) = @_;
    return scalar grep { IdemRecord::type($Fault, "idem:c:{$_}") eq 'none' }
                       @ids;
}

sub dropped {
    return IdemWait::metric('idem_record_writes_total{result="dropped"}')
           // -1;
}

sub queued {
    return IdemWait::metric('idem_record_writes_total{result="queued"}')
           // -1;
}

# waits until the counter of dropped writes is $n: a test
sub dropped_ok {
    my ($n, $what) = @_;
    Test::More::ok(IdemWait::wait_for("$n dropped writes",
                                      sub { main::dropped() == $n }, 10),
                   $what) or Test::More::diag('dropped: ' . main::dropped());
}

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: Redis stopped: the writes held for it outlive their timeout and are dropped, each counted once: as many as the calls left without a record
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT connect_timeout=200ms timeout=500ms;
    idem_record_arrival_delay 10s;
--- config
    location /r {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
main::up();
my @ids = map { "wd-held-$_" } 1 .. 5;
main::lost(\&RedisFault::stop);
Test::More::is(main::calls('/r', @ids), 5, 'the calls: 200 at once');
main::dropped_ok(5, 'their writes dropped past the timeout');
main::up();
Test::More::is(main::missing(@ids), 5, 'no record of any');
Test::More::is(main::queued(), 5, 'queued: 5');
--- request
GET /metrics
--- response_body_like
idem_record_writes_total\{result="queued"\} 5
idem_record_writes_total\{result="dropped"\} 5
--- error_log
dropped (not connected)
--- no_error_log
[alert]
[crit]



=== TEST 2: Redis stopped and a hold that fills (max_pending=3): 3 writes held, then dropped; 2 refused at once; 5 dropped, never counted twice
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT connect_timeout=200ms timeout=500ms max_pending=3;
    idem_record_arrival_delay 10s;
--- config
    location /r {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
main::up();
my @ids = map { "wd-full-$_" } 1 .. 5;
main::lost(\&RedisFault::stop);
Test::More::is(main::calls('/r', @ids), 5, 'the calls: 200 at once');
main::dropped_ok(5, 'their writes dropped, at once and past the timeout');
main::up();
Test::More::is(main::missing(@ids), 5, 'no record of any');
--- request
GET /metrics
--- response_body_like
idem_record_writes_total\{result="queued"\} 3
idem_record_writes_total\{result="dropped"\} 5
--- error_log eval
qr/dropped \((?:3 pending|not connected, 3 or)/
--- no_error_log
[alert]
[crit]



=== TEST 3: Redis paused (SIGSTOP), then killed: the writes sent to it were lost with the connection before their answer, each counted once
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT connect_timeout=200ms timeout=500ms;
    idem_record_arrival_delay 10s;
--- config
    location /r {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
main::up();
my @ids = map { "wd-lost-$_" } 1 .. 4;
RedisFault::pause();
Test::More::is(main::calls('/r', @ids), 4, 'the calls: 200 at once');
Test::More::is(main::dropped(), 0, 'nothing dropped while they may land');
main::lost(sub { kill 'KILL', RedisFault::pid() });
main::dropped_ok(4, 'their writes dropped with the connection');
main::up();
Test::More::is(main::missing(@ids), 4, 'no record of any');
--- request
GET /metrics
--- response_body_like
idem_record_writes_total\{result="queued"\} 4
idem_record_writes_total\{result="dropped"\} 4
--- no_error_log
[alert]
[crit]



=== TEST 4: Redis paused past the timeout, then resumed: the writes land late, none dropped
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT connect_timeout=200ms timeout=300ms;
    idem_record_arrival_delay 10s;
--- config
    location /r {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
main::up();
my @ids = map { "wd-late-$_" } 1 .. 3;
RedisFault::pause();
Test::More::is(main::calls('/r', @ids), 3, 'the calls: 200 at once');
# a write that left for Redis is waited for past its timeout, not given up
Test::More::ok(IdemWait::wait_for('their timeouts',
                   sub { IdemWait::log_count(qr/no reply within the timeout, \d+ redirects, a write: waited for/) >= 3 }),
               '3 past their timeout, waited for');
RedisFault::resume();
Test::More::ok(IdemWait::wait_for('the records',
                   sub { main::missing(@ids) == 0 }), 'every record landed');
--- request
GET /metrics
--- response_body_like
idem_record_writes_total\{result="queued"\} 3
idem_record_writes_total\{result="dropped"\} 0
--- no_error_log
[alert]
[crit]



=== TEST 5: Redis out of memory (maxmemory 1): the writes it refuses are dropped, each counted once
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT connect_timeout=200ms timeout=500ms;
    idem_record_arrival_delay 10s;
--- config
    location /r {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /metrics {
        idem_metrics;
    }
--- init
main::up();
my @ids = map { "wd-oom-$_" } 1 .. 3;
main::redis('config set maxmemory 1');
Test::More::is(main::calls('/r', @ids), 3, 'the calls: 200 at once');
main::dropped_ok(3, 'the writes Redis refused');
main::redis('config set maxmemory 0');
Test::More::is(main::missing(@ids), 3, 'no record of any');
--- request
GET /metrics
--- response_body_like
idem_record_writes_total\{result="queued"\} 3
idem_record_writes_total\{result="dropped"\} 3
--- error_log
last error: "OOM
--- no_error_log
[alert]
[crit]



=== TEST 6: Redis stopped during a call that writes twice (its arrival, then its end): two writes dropped, not one a command
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_FAULT_PORT connect_timeout=200ms timeout=500ms;
    idem_record_arrival_delay 0;
--- config
    location /slow {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/200/1;
    }
    location /metrics {
        idem_metrics;
    }
--- init
main::up();
main::lost(\&RedisFault::stop);
Test::More::is(main::calls('/slow', 'wd-two-1'), 1, 'the call: 200');
main::dropped_ok(2, 'its two writes dropped');
main::up();
Test::More::is(main::missing('wd-two-1'), 1, 'no record');
--- request
GET /metrics
--- response_body_like
idem_record_writes_total\{result="queued"\} 2
idem_record_writes_total\{result="dropped"\} 2
--- no_error_log
[alert]
[crit]
