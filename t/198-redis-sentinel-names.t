# Redis Sentinel with host names, for real (t/lib/RedisSentinel.pm's
# start(hostnames => 1): a master, a replica and 3 sentinels that resolve
# and announce host names, every Redis named "localhost"; a gateway with
# two workers and http{}'s resolver, the tests' DNS server):
#
#  1. the sentinels are named by host names (idem_redis sentinel=mymaster
#     NAME:PORT ...), each resolved at its connect, the first one a name
#     that does not resolve (skipped for the next); the master they name
#     by its host name ("localhost", announce-hostnames) is resolved and
#     recorded on; the connects counted by name and role (a sentinel's
#     name that did not resolve: reason="resolve");
#  2. the master is killed: the sentinels promote the replica and name it
#     by its host name (+switch-master), the gateway follows, without a
#     reload.
#
# Plain Test::More, as t/195: Redis processes are killed and failed over
# between requests.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(sleep time);

our $Map;

BEGIN {
    # the map in the file's own scratch folder (t/lib/IdemPaths.pm)
    require lib;
    lib->import('t/lib');
    require IdemPaths;
    $Map = IdemPaths::scratch() . '/dns-map';
    $IdemDns::Map = $Map;
}

use lib 't/lib';
use IdemDns;
use RedisSentinel;
use IdemGateway;
use IdemWait qw(wait_for);

my $backend = $ENV{TEST_NGINX_BACKEND_PORT}
    or plan skip_all => 'TEST_NGINX_BACKEND_PORT is not set (use make test)';
my $base = $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT} || 1984;
my $gw = $base + 156;

END {
    local $?;
    IdemGateway::stop_all();
    RedisSentinel::stop();
    unlink $Map if defined $Map;
}

my @s = RedisSentinel::sentinels();

IdemDns::map('localhost' => ['127.0.0.1', 1],
             map { ("sentinel-$_.idem.test" => ['127.0.0.1', 1]) } 0 .. 2);

RedisSentinel::start(hostnames => 1);

is(join(' ', split /\n/, RedisSentinel::cli($s[0], 'sentinel',
                                            'get-master-addr-by-name',
                                            'mymaster')),
   'localhost ' . RedisSentinel::master(),
   'the sentinels name the master by its host name');

# the first sentinel's name is not in the DNS server's map (NXDOMAIN)
my $sentinels = join ' ', "nosuch.idem.test:$s[0]",
                          map { "sentinel-$_.idem.test:$s[$_]" } 1 .. 2;

# a server of its own for idem_metrics, beside the gateway's
my $mport = $gw + 1;

my $master_pid = IdemGateway::start($gw,
    "resolver 127.0.0.1:$IdemDns::Port valid=1s;\n"
    . "    server { listen 127.0.0.1:$mport; "
    . "location /metrics { idem_metrics; } }\n"
    . "    idem_redis sentinel=mymaster $sentinels connect_timeout=300ms "
    . "timeout=500ms", $backend);

my $named = qr/idem: redis sentinel: master "mymaster" is /;

ok(wait_for('the master named to both workers', sub {
       my @named = IdemGateway::log_text($gw) =~ /$named/g;
       return @named >= 2;
   }), 'both workers know the master');

my $log = IdemGateway::log_text($gw);

like($log, qr/idem: redis "nosuch\.idem\.test:$s[0]": connect failed: "nosuch\.idem\.test" could not be resolved/,
     'the sentinel whose name does not resolve is skipped');
like($log, qr/idem redis: resolving "sentinel-1\.idem\.test"/,
     'the next sentinel is resolved by its name');
like($log, qr/${named}localhost:${\RedisSentinel::master()} \(asked, /,
     'the master named by its host name');
like($log, qr/idem redis: resolving "localhost"/,
     "the master's name is resolved");

# the connects, counted by name and role (t/071 has the others)
my $scrape;
wait_for('the master connected, counted', sub {
    $scrape = IdemWait::get($mport, '/metrics');
    $scrape =~ /^idem_redis_connects_total\{node="localhost:\d+",role="data"\} [1-9]/m;
});
like($scrape, qr/^idem_redis_connect_failures_total\{node="nosuch\.idem\.test:$s[0]",role="sentinel",reason="resolve"\} [1-9]\d*$/m,
     'the sentinel whose name does not resolve: counted, reason="resolve"');
like($scrape, qr/^idem_redis_connects_total\{node="sentinel-1\.idem\.test:$s[1]",role="sentinel"\} [1-9]\d*$/m,
     'the named sentinel: its connections counted');
like($scrape, qr/^idem_redis_connects_total\{node="localhost:${\RedisSentinel::master()}",role="data"\} [1-9]\d*$/m,
     'the named master: its connections counted');

my $n = 0;
sub fresh_id { "t198-$$-" . $n++ }

sub call {
    my ($id) = @_;
    return scalar IdemGateway::send_all([$gw, IdemGateway::post($id, 'x=1',
                                                                '/q')]);
}

sub has_key {
    my ($port, $id) = @_;
    return RedisSentinel::cli($port, 'exists', "idem:c:{$id}") eq '1';
}

# calls, one every 50 ms, until 10 in a row are served (or 30 s)
sub until_served {
    my ($t0) = @_;
    my ($ok_run, $other) = (0, 0);
    while (time - $t0 < 30 && $ok_run < 10) {
        my $r = call(fresh_id());
        if (IdemGateway::is_original($r)) {
            $ok_run++;
        } else {
            $other++ unless defined $r && $r->{status} == 503;
            $ok_run = 0;
        }
        sleep 0.05;
    }
    return ($ok_run >= 10, $other);
}


# 1. recorded on the master named by its host name

my $before = fresh_id();
ok(IdemGateway::is_original(call($before)), 'a call');
ok(has_key(RedisSentinel::master(), $before), 'its record is on the master');


# 2. a failover with names

{
    my $old = RedisSentinel::master();
    my $new = RedisSentinel::replica();

    RedisSentinel::cli($old, 'wait', 1, 1000);
    RedisSentinel::kill_node($old, 'KILL');

    my ($served, $other) = until_served(time);
    ok($served, 'calls are served again after the failover');
    is($other, 0, 'meanwhile calls got 503, nothing else');

    my $switch = qr/\] (\d+)#\d+: [^\n]*${named}localhost:$new /
                 . qr/\((?:switched|asked), was localhost:$old\)/;
    ok(wait_for('both workers followed', sub {
           my %pids = map { $_ => 1 } IdemGateway::log_text($gw)
                                      =~ /$switch/g;
           return keys %pids == 2;
       }), 'both workers followed the failover to the name and port')
        or diag(join "\n", RedisSentinel::events());

    my $after = fresh_id();
    ok(IdemGateway::is_original(call($after)), 'a call after the failover');
    ok(has_key($new, $after), 'its record is on the new master');
    ok(kill(0, $master_pid), 'without a reload (the same nginx)');
}

IdemGateway::stop_all();

my @bad = IdemGateway::bad_lines($gw,
    qr/idem: redis "(?:nosuch\.idem\.test:\d+|localhost:\d+|sentinel=mymaster)": (?:connect|connection lost|since the last report)/);
is(scalar @bad, 0, 'nothing logged but the name that does not resolve and '
                   . 'the lost master')
    or diag(join "\n", @bad[0 .. ($#bad < 4 ? $#bad : 4)]);
unlike(IdemGateway::log_text($gw), qr/\[(?:alert|crit|emerg)\]|exited on signal/,
       'no alert, no crash');

done_testing();
