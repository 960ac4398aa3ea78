# A Redis named by a host name (idem_redis NAME:PORT): resolved through
# http{}'s resolver, never by a blocking call, at each connect; a name
# with no resolver fails nginx -t; a name that does not resolve is a
# Redis that is down (503), logged with the name; a DNS failover (the
# managed-Redis case: the replica promoted, the old primary made its
# replica, the name pointed at the new one): the old primary's READONLY
# makes the connection end and resolve again (counted:
# idem_redis_connect_failures_total{reason="readonly"}), the refused
# writes are held and sent to the new primary, and nothing is lost or run
# twice.
# The suite's DNS server (t/lib/IdemDns.pm) answers from a map this file
# writes; two redis-servers of the file's own listen on the same port of
# 127.0.0.1 and 127.0.0.2 (both loopback), so that only the name moves.

our ($Map, $Port);

BEGIN {
    # the map in the file's own scratch folder (t/lib/IdemPaths.pm)
    require lib;
    lib->import('t/lib');
    require IdemPaths;
    $Map = IdemPaths::scratch() . '/dns-map';
    $IdemDns::Map = $Map;
    $Port = ($ENV{TEST_NGINX_REDIS_PORT} // 16379) + 520;
}

use lib 't/lib';
use IdemDns;
use IdemWait ();
use IdemPaths ();
use IdemBg qw(bg done);
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): fixed call ids, and a failover that happens once.

$ENV{TEST_NGINX_DNS_PORT} = $IdemDns::Port;
$ENV{TEST_NGINX_NAMED_REDIS_PORT} = $Port;

my %pid;

sub cli {
    my ($ip, @args) = @_;
    my $out = `redis-cli -h $ip -p $Port @args 2>&1`;
    chomp $out;
    return $out;
}

sub start_redis {
    my ($ip) = @_;
    my $dir = IdemPaths::scratch() . "/redis-$ip";
    system('rm', '-rf', $dir);
    mkdir $dir or die "$dir: $!";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        exec 'redis-server', '--bind', $ip, '--port', $Port, '--save', '',
             '--appendonly', 'no', '--dir', $dir,
             '--maxmemory-policy', 'noeviction',
             '--logfile', "$dir/redis.log";
        exit 127;
    }
    $pid{$ip} = $pid;
    IdemWait::wait_for("redis on $ip:$Port",
                       sub { cli($ip, 'ping') eq 'PONG' })
        or die "redis on $ip:$Port did not start";
}

END {
    IdemBg::stop_all();
    kill 'TERM', values %pid;
    waitpid $_, 0 for values %pid;
    unlink $Map;
}

IdemDns::map('redis.idem.test' => ['127.0.0.1', 1]);
start_redis('127.0.0.1');
start_redis('127.0.0.2');
cli('127.0.0.2', 'replicaof', '127.0.0.1', $Port);

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: a name resolved by nginx's resolver: a recorded call and its status read on the Redis it names
--- http_config
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT valid=1s;
    idem_redis redis.idem.test:$TEST_NGINX_NAMED_REDIS_PORT timeout=5s;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- init
main::cli('127.0.0.1', 'flushall');
--- request eval
["POST /pay\nx=1", "GET /calls/dns-1"]
--- more_headers
X-Call-Id: dns-1
--- error_code eval
[200, 200]
--- response_body_like eval
["^n=1 ", '"call_id":"dns-1",.*"state":"SUCCESS"']
--- no_error_log
[error]



=== TEST 2: ... the record is on 127.0.0.1, where the name pointed
--- config
    location /t { return 200; }
--- init
Test::More::ok(IdemWait::wait_for('the record on 127.0.0.1',
    sub { main::cli('127.0.0.1', 'exists', "'idem:c:{dns-1}'") eq '1' }),
    'the record on 127.0.0.1');
--- request
GET /t
--- error_code: 200



=== TEST 3: a name without a resolver in http{} fails nginx -t, saying to add one
--- http_config
    idem_redis redis.idem.test:6379;
--- config
    location /t { return 200; }
--- must_die
--- error_log
"idem_redis redis.idem.test:6379" names a host: add a "resolver" to http{}



=== TEST 4: what is not a host name is refused as before
--- http_config
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT;
    idem_redis bad..name:6379;
--- config
    location /t { return 200; }
--- must_die
--- error_log
invalid value "bad..name:6379" in "idem_redis" directive, it must be an IP address and port, a host name and port, or unix:/path



=== TEST 5: a name that does not resolve: the store is down (503), the error names the name
--- http_config
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT;
    resolver_timeout 2s;
    idem_redis nosuch.idem.test:$TEST_NGINX_NAMED_REDIS_PORT timeout=300ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
IdemWait::log_ok('the name not resolved',
                 qr/"nosuch\.idem\.test" could not be resolved/);
--- request
GET /calls/dns-5
--- error_code: 503
--- error_log eval
qr/idem: redis "nosuch\.idem\.test:\d+": connect failed: "nosuch\.idem\.test" could not be resolved \(3: Host not found\)/
--- no_error_log
[alert]
[crit]



=== TEST 6: a DNS failover: the replica promoted, the old primary its replica; a claim meets READONLY there: the worker connects again, resolving the name each time, and holds the claim; the name moved, the claim and the final write land on the new primary; the resend is replayed, one execution
--- http_config
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT valid=1s;
    idem_redis redis.idem.test:$TEST_NGINX_NAMED_REDIS_PORT timeout=10s;
--- config
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /log/ {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
    location /metrics {
        idem_metrics;
    }
--- init
main::cli('127.0.0.1', 'flushall');
# the worker connected to 127.0.0.1 (a first call on it)
my $first = `curl -s -o /dev/null -w '%{http_code}' -H 'X-Call-Id: dns-6a' --data x=1 http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/d`;
Test::More::is($first, '200', 'a call before the failover');
# the failover, as a managed Redis does it; the name not moved yet
main::cli('127.0.0.2', 'replicaof', 'no', 'one');
main::cli('127.0.0.1', 'replicaof', '127.0.0.2', $main::Port);
Test::More::ok(IdemWait::wait_for('127.0.0.1 a replica',
    sub { main::cli('127.0.0.1', 'role') =~ /^slave/ }), '127.0.0.1 a replica');
main::bg('owner6', 'dns-6', '/d', '--data', 'x=1');
IdemWait::log_ok('READONLY met, the connection made again',
    qr/idem: redis "redis\.idem\.test:\d+": READONLY from 127\.0\.0\.1: a replica now, connecting again to where its name points/);
Test::More::is(IdemWait::backend_runs('dns-6'), 0, 'not forwarded unclaimed');
IdemDns::map('redis.idem.test' => ['127.0.0.2', 1]);
Test::More::like(main::done('owner6'), qr{^HTTP/1\.1 200 .*\r\n\r\nn=1 }s,
                 'claimed on the new primary, forwarded: 200');
--- request eval
["POST /d\nx=1", "GET /log/dns-6", "GET /metrics"]
--- more_headers eval
["X-Call-Id: dns-6", "", ""]
--- error_code eval
[200, 200, 200]
--- response_headers eval
["Idempotent-Replayed: true", "", ""]
--- response_body_like eval
["^n=1 ", '\An=1 [^\n]*\n\z',
 qr/^idem_redis_connects_total\{node="redis\.idem\.test:\d+",role="data"\} (?:[2-9]|[1-9]\d+)\n(?:.*\n)*idem_redis_connect_failures_total\{node="redis\.idem\.test:\d+",role="data",reason="readonly"\} [1-9]\d*$/m]
--- no_error_log
[alert]
[crit]



=== TEST 7: ... the call's record is on the new primary, 127.0.0.2
--- config
    location /t { return 200; }
--- init
Test::More::ok(IdemWait::wait_for('the record on 127.0.0.2',
    sub { main::cli('127.0.0.2', 'exists', "'idem:c:{dns-6}'") eq '1' }),
    'the record on 127.0.0.2');
--- request
GET /t
--- error_code: 200



=== TEST 8: the name moved while connected (its answer's validity ended): the worker connects to the new address before any write meets READONLY; the next calls land there
--- http_config
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT valid=1s;
    idem_redis redis.idem.test:$TEST_NGINX_NAMED_REDIS_PORT timeout=5s;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
--- init
my $first = `curl -s -o /dev/null -w '%{http_code}' -H 'X-Call-Id: dns-8a' --data x=1 http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}/pay`;
Test::More::is($first, '200', 'a call on 127.0.0.2');
main::cli('127.0.0.1', 'replicaof', 'no', 'one');
main::cli('127.0.0.2', 'replicaof', '127.0.0.1', $main::Port);
IdemDns::map('redis.idem.test' => ['127.0.0.1', 1]);
IdemWait::log_ok('the new address seen',
    qr/idem: redis "redis\.idem\.test:\d+": its name is 127\.0\.0\.1 now, not 127\.0\.0\.2: connecting there/);
IdemWait::log_ok('connected again', qr/idem: redis "redis\.idem\.test:\d+": connected again/);
--- request
POST /pay
x=1
--- more_headers
X-Call-Id: dns-8
--- error_code: 200
--- no_error_log
[error]
READONLY



=== TEST 9: ... that call's record is on 127.0.0.1
--- config
    location /t { return 200; }
--- init
Test::More::ok(IdemWait::wait_for('the record on 127.0.0.1',
    sub { main::cli('127.0.0.1', 'exists', "'idem:c:{dns-8}'") eq '1' }),
    'the record on 127.0.0.1');
--- request
GET /t
--- error_code: 200
