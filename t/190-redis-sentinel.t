# Redis Sentinel (idem_redis sentinel=NAME ...): a real master, replica and
# 3 sentinels (t/lib/RedisSentinel.pm).  The gateway asks a sentinel for
# the master and records, reads and claims there; a sentinel that is down
# is skipped; a name no sentinel knows is Redis down; the directive's
# checks; a sentinel that names a replica (a fake one).  Failover:
# t/195-redis-sentinel-failover.t; host names: t/198.

use lib 't/lib';
use RedisSentinel;
use IdemWait ();
use FakeRedisCluster;
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): dedupe of fixed call ids, and a Redis failure reported
# once a period (the second run's is not logged again).

RedisSentinel::start();
$ENV{TEST_NGINX_SENTINEL_PORTS} = join ' ',
    map { "127.0.0.1:$_" } RedisSentinel::sentinels();
$ENV{TEST_NGINX_SENTINEL_PORT} = (RedisSentinel::sentinels())[1];
$ENV{TEST_NGINX_SENTINEL_MASTER} = RedisSentinel::master();

# a sentinel that names the replica as the master
$ENV{TEST_NGINX_FAKE_SENTINEL_PORT} = RedisSentinel::base() + 50;
FakeRedisCluster::start($ENV{TEST_NGINX_FAKE_SENTINEL_PORT}, sub {
    my ($args) = @_;
    my $cmd = uc $args->[0];
    my $replica = RedisSentinel::replica();
    return "*2\r\n\$9\r\n127.0.0.1\r\n\$" . length($replica)
           . "\r\n$replica\r\n" if $cmd eq 'SENTINEL';
    return "*3\r\n\$9\r\nsubscribe\r\n\$14\r\n+switch-master\r\n:1\r\n"
        if $cmd eq 'SUBSCRIBE';
    return "+OK\r\n";
});

# a sentinel that names the master by a host name (announce-hostnames)
$ENV{TEST_NGINX_NAMING_SENTINEL_PORT} = RedisSentinel::base() + 51;
FakeRedisCluster::start($ENV{TEST_NGINX_NAMING_SENTINEL_PORT}, sub {
    my ($args) = @_;
    my $cmd = uc $args->[0];
    my $master = RedisSentinel::master();
    return "*2\r\n\$9\r\nlocalhost\r\n\$" . length($master)
           . "\r\n$master\r\n" if $cmd eq 'SENTINEL';
    return "*3\r\n\$9\r\nsubscribe\r\n\$14\r\n+switch-master\r\n:1\r\n"
        if $cmd eq 'SUBSCRIBE';
    return "+OK\r\n";
});

END { local $?; FakeRedisCluster::stop(); RedisSentinel::stop() }

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: records, status reads and dedupe on the master the sentinels name
--- http_config
    idem_redis sentinel=mymaster $TEST_NGINX_SENTINEL_PORTS timeout=500ms;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /d {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope off;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
    location /ping {
        return 200;
    }
--- init
IdemWait::log_ok('a sentinel named the master',
                  qr/idem: redis sentinel: master "mymaster" is /);
--- request eval
["GET /t", "GET /calls/sn-1-$$", "POST /d\nx", "POST /d\nx", "POST /d\ny",
 "GET /calls/sn-none-$$"]
--- more_headers eval
["X-Call-Id: sn-1-$$", "", "X-Call-Id: sn-2-$$", "X-Call-Id: sn-2-$$",
 "X-Call-Id: sn-2-$$", ""]
--- error_code eval
[200, 200, 200, 200, 422, 404]
--- response_headers eval
["", "", "!Idempotent-Replayed", "Idempotent-Replayed: true", "", ""]
--- response_body_like eval
["n=1 ", qq{"call_id":"sn-1-$$",.*"state":"SUCCESS"}, "n=1 ", "n=1 ",
 "payload-mismatch", "NOT_FOUND"]
--- no_error_log
[error]



=== TEST 2: the records are on the master
--- request
GET /ping
--- init
Test::More::is(RedisSentinel::cli($ENV{TEST_NGINX_SENTINEL_MASTER},
                                  'exists', "idem:c:{sn-1-$$}"), 1,
               'the record is on the master');
--- error_code: 200
--- no_error_log
[error]



=== TEST 2b: idem_metrics shows the master the sentinels named and the sentinels, each with whether it is up (role="data", role="sentinel")
--- http_config
    idem_redis sentinel=mymaster $TEST_NGINX_SENTINEL_PORTS timeout=500ms;
--- config
    location /metrics {
        idem_metrics;
    }
--- init
# the log holds the blocks before this one too: asked of the gauge itself
Test::More::ok(IdemWait::wait_for('the master named and connected',
    sub { IdemWait::get($ENV{TEST_NGINX_SERVER_PORT}, '/metrics')
          =~ /role="data"\} 1$/m }), 'the master named and connected');
--- request
GET /metrics
--- response_body_like eval
qr/^idem_redis_up\{node="127\.0\.0\.1:$ENV{TEST_NGINX_SENTINEL_MASTER}",role="data"\} 1\n(?:.*\n)*?idem_redis_up\{node="127\.0\.0\.1:\d+",role="sentinel"\} 1\n(?:.*\n)*?idem_redis_connections\{node="127\.0\.0\.1:$ENV{TEST_NGINX_SENTINEL_MASTER}",role="data"\} 1\n/m
--- no_error_log
[error]



=== TEST 3: the first sentinel listed is down: the next one is asked
--- http_config
    idem_redis sentinel=mymaster 127.0.0.1:1 127.0.0.1:$TEST_NGINX_SENTINEL_PORT
               connect_timeout=200ms timeout=500ms;
--- config
    location /t {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_status;
    }
--- init
IdemWait::log_ok('a sentinel named the master',
                  qr/idem: redis sentinel: master "mymaster" is /);
--- request eval
["GET /t", "GET /calls/sn-3-$$"]
--- more_headers eval
["X-Call-Id: sn-3-$$", ""]
--- error_code eval
[200, 200]
--- response_body_like eval
["n=1 ", '"state":"SUCCESS"']
--- no_error_log
[alert]
[crit]



=== TEST 4: a master name no sentinel knows: Redis is down (UNKNOWN, 503)
--- http_config
    idem_redis sentinel=nosuch 127.0.0.1:$TEST_NGINX_SENTINEL_PORT
               timeout=300ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
IdemWait::log_ok('a sentinel asked',
                  qr/does not name a master "nosuch", asking another one/);
--- request
GET /calls/sn-4
--- error_code: 503
--- response_body_like: UNKNOWN
--- error_log
idem: redis sentinel "127.0.0.1:
does not name a master "nosuch", asking another one
--- no_error_log
[alert]
[crit]



=== TEST 5: a password for the sentinels is sent to them (AUTH), not to Redis
--- http_config
    idem_redis sentinel=mymaster 127.0.0.1:$TEST_NGINX_SENTINEL_PORT
               sentinel_password=secret timeout=300ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
IdemWait::log_ok('the AUTH refused',
                  qr/idem: redis "127\.0\.0\.1:\d+": AUTH failed/);
--- request
GET /calls/sn-5
--- error_code: 503
--- error_log eval
qr/idem: redis "127\.0\.0\.1:\d+": AUTH failed: "ERR AUTH <password> called without any password configured/
--- no_error_log
[alert]
[crit]



=== TEST 5c: an ACL user for the sentinels: AUTH user password (refused: the sentinels have no such user)
--- http_config
    idem_redis sentinel=mymaster 127.0.0.1:$TEST_NGINX_SENTINEL_PORT
               sentinel_user=idem-sentinel sentinel_password=secret
               timeout=300ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
IdemWait::log_ok('the AUTH refused',
                  qr/idem: redis "127\.0\.0\.1:\d+": AUTH failed: "WRONGPASS/);
--- request
GET /calls/sn-5c
--- error_code: 503
--- error_log eval
qr/idem: redis "127\.0\.0\.1:\d+": AUTH failed: "WRONGPASS invalid username-password pair/
--- no_error_log
[alert]
[crit]



=== TEST 5d: an ACL user for the master goes to the master the sentinels name, not to them
--- http_config
    idem_redis sentinel=mymaster 127.0.0.1:$TEST_NGINX_SENTINEL_PORT
               user=idem-gw password=secret timeout=300ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
IdemWait::log_ok('the master refused the AUTH',
                  qr/idem: redis "[^"]+": AUTH failed: "WRONGPASS/);
--- request
GET /calls/sn-5d
--- error_code: 503
--- error_log eval
qr/idem: redis "127\.0\.0\.1:\d+": AUTH failed: "WRONGPASS invalid username-password pair/
--- no_error_log
[alert]
[crit]



=== TEST 5b: a sentinel naming a replica: ROLE says so, the connection is closed
--- http_config
    idem_redis sentinel=mymaster 127.0.0.1:$TEST_NGINX_FAKE_SENTINEL_PORT
               timeout=300ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
IdemWait::log_ok('the replica found out',
                  qr/is not a master \(ROLE\), closing it/);
--- request
GET /calls/sn-5b
--- error_code: 503
--- response_body_like: UNKNOWN
--- error_log eval
qr/idem: redis sentinel: "127\.0\.0\.1:\d+" is not a master \(ROLE\), closing it/
--- no_error_log
[alert]
[crit]



=== TEST 5e: a master named by a host name, with no resolver in http{}: ignored, said so (with one: t/198)
--- http_config
    idem_redis sentinel=mymaster 127.0.0.1:$TEST_NGINX_NAMING_SENTINEL_PORT
               timeout=300ms;
--- config
    location /calls/ {
        idem_status;
    }
--- init
IdemWait::log_ok('the host name ignored',
                  qr/at "localhost" port \d+ is not an IP address/);
--- request
GET /calls/sn-5e
--- error_code: 503
--- response_body_like: UNKNOWN
--- error_log eval
qr/idem: redis sentinel: master "mymaster" at "localhost" port \d+ is not an IP address and port \(a host name needs a "resolver" in http\{\}\), ignored/
--- no_error_log
[alert]
[crit]



=== TEST 6: sentinel= without a name
--- http_config
    idem_redis sentinel= 127.0.0.1:26379;
--- config
    location /t { return 200; }
--- must_die
--- error_log
invalid value "sentinel=" in "idem_redis" directive



=== TEST 7: sentinel= without sentinels
--- http_config
    idem_redis sentinel=mymaster password=x;
--- config
    location /t { return 200; }
--- must_die
--- error_log
"idem_redis sentinel=mymaster" needs at least one IP address and port



=== TEST 7b: sentinel_user= only with sentinel=
--- http_config
    idem_redis 127.0.0.1:6379 sentinel_user=x sentinel_password=x;
--- config
    location /t { return 200; }
--- must_die
--- error_log
invalid parameter "sentinel_user=x" in "idem_redis" directive



=== TEST 8: sentinel_password= only with sentinel=
--- http_config
    idem_redis 127.0.0.1:6379 sentinel_password=x;
--- config
    location /t { return 200; }
--- must_die
--- error_log
invalid parameter "sentinel_password=x" in "idem_redis" directive



=== TEST 9: sentinels named by host names need a resolver in http{} (t/198 resolves them)
--- http_config
    idem_redis sentinel=mymaster 127.0.0.1:26379 localhost:26379;
--- config
    location /t { return 200; }
--- must_die
--- error_log
"idem_redis localhost:26379" names a host: add a "resolver" to http{}



=== TEST 9b: a sentinel is an IP or a host name and port, not a path
--- http_config
    idem_redis sentinel=mymaster unix:/tmp/sentinel.sock;
--- config
    location /t { return 200; }
--- must_die
--- error_log
invalid value "unix:/tmp/sentinel.sock" in "idem_redis" directive, it must be an IP address and port, or a host name and port
