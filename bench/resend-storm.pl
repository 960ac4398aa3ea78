#!/usr/bin/perl
# A client that resends too fast, measured (make resend-storm): what
# idem_resend_limit saves the other clients of a dedupe route with
# idem_dedupe_wait.  A report, not a timed test: exit 0 whatever the
# numbers (non-zero only when it cannot run).
#
# Under build/resend-storm/run/ it starts a redis-server, a backend (nginx
# with the echo module: /fast answers after 100 ms, /slow after 60 s) and
# the gateway (nginx with the module, one worker) with one dedupe route
# that waits (idem_dedupe_wait 2s, idem_dedupe_wait_max WAIT_MAX, a small
# table so that 50 ids fill it, as a bigger storm fills 4096), in two
# configurations: without a limit, and with
#
#     idem_resend_limit_zone $http_x_client zone=clients:1m rate=10r/s;
#     idem_resend_limit zone=clients burst=20 concurrent=4;
#
# The clients, each its own X-Client (the zone's key):
#   - 20 well-behaved ones: each sends a new call (its owner, 100 ms at
#     the backend), and 20 ms later a resend of it (a client library's
#     retry), which waits for the owner's answer and gets it replayed;
#     about 5 calls a second each;
#   - one storming client: 50 call ids whose owners the backend holds for
#     the whole run, each resent in a loop of its own with 50 ms between
#     answers (about 1,000 resends a second while answers are quick).
# Three runs of STORM_SECONDS: no storm; the storm, no limit; the storm
# with the limit.  Per run: the well-behaved clients' p50/p99 (owners and
# resends together) and the share of their resends answered 409
# call-in-flight; the storming client's resends per second and how they
# were answered.  The table also goes to build/resend-storm/result.txt.
#
# Environment:
#   STORM_SECONDS=10   seconds per run
#   WAIT_MAX=32        idem_dedupe_wait_max
#   NGINX_BIN=/usr/sbin/nginx

use strict;
use warnings;
use IO::Socket::INET;
use POSIX ();
use Time::HiRes qw(time sleep);
use File::Path qw(make_path remove_tree);
use Cwd qw(abs_path);

my $root = abs_path(__FILE__ =~ m{^(.*)/bench/} ? $1 : '.');
my $dir = "$root/build/resend-storm";
my $run = "$dir/run";
my $module = "$root/build/ngx_http_idem_module.so";
my $echo = '/usr/lib/nginx/modules/ngx_http_echo_module.so';
my $nginx = $ENV{NGINX_BIN} || '/usr/sbin/nginx';
my $secs = $ENV{STORM_SECONDS} || 10;
my $wait_max = $ENV{WAIT_MAX} || 32;

sub die_ { print STDERR "resend-storm: @_\n"; exit 1 }

-f $module or die_("no $module: run make first");
-f $echo or die_("no $echo (libnginx-mod-http-echo)");

sub free_port {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Listen => 1) or die_("no free port: $!");
    my $p = $s->sockport;
    close $s;
    return $p;
}

my ($redis_port, $backend_port, $gw_port) = map { free_port() } 1 .. 3;

remove_tree($run);
make_path("$run/redis", "$run/backend/logs", "$run/gateway/logs");

my @stop;

END {
    local $?;
    for my $s (reverse @stop) { $s->() }
}

sub temp_paths {
    my ($d) = @_;
    return join '', map { "    ${_}_temp_path $d/$_;\n" }
                    qw(client_body proxy fastcgi uwsgi scgi);
}

sub start_nginx {
    my ($name, $conf) = @_;
    my $d = "$run/$name";
    open my $fh, '>', "$d/nginx.conf" or die_("$d/nginx.conf: $!");
    print $fh $conf;
    close $fh;
    system("$nginx -p $d/ -c $d/nginx.conf -e $d/logs/error.log") == 0
        or die_("$name: nginx does not start (see $d/logs/error.log)");
    push @stop, sub {
        if (open my $p, '<', "$d/logs/nginx.pid") {
            my $pid = <$p>;
            chomp $pid;
            kill 'QUIT', $pid if $pid;
        }
    };
}

sub user { $> == 0 ? "user root;\n" : '' }

# redis
system("redis-server --port $redis_port --bind 127.0.0.1 --save '' "
       . "--appendonly no --daemonize yes --dir $run/redis "
       . "--pidfile $run/redis/redis.pid --logfile $run/redis/redis.log") == 0
    or die_('redis-server does not start');
push @stop, sub { system("redis-cli -p $redis_port shutdown nosave "
                         . ">/dev/null 2>&1") };

# the backend
start_nginx('backend', user() . <<"CONF");
load_module $echo;
worker_processes 1;
pid $run/backend/logs/nginx.pid;
error_log $run/backend/logs/error.log;
events { worker_connections 4096; }
http {
${\ temp_paths("$run/backend")}
    access_log off;
    server {
        listen 127.0.0.1:$backend_port backlog=4096;
        location /fast { echo_read_request_body; echo_sleep 0.1; echo ok; }
        location /slow { echo_read_request_body; echo_sleep 60; echo ok; }
    }
}
CONF

sub gateway_conf {
    my ($limit) = @_;
    my $zone = $limit
        ? 'idem_resend_limit_zone $http_x_client zone=clients:1m rate=10r/s;'
        : '';
    my $use = $limit
        ? 'idem_resend_limit zone=clients burst=20 concurrent=4;' : '';
    return user() . <<"CONF";
load_module $module;
worker_processes 1;
pid $run/gateway/logs/nginx.pid;
error_log $run/gateway/logs/error.log error;
worker_shutdown_timeout 1s;
events { worker_connections 8192; }
http {
${\ temp_paths("$run/gateway")}
    access_log off;
    idem_redis 127.0.0.1:$redis_port;
    idem_dedupe_wait_max $wait_max;
    $zone
    upstream backend {
        server 127.0.0.1:$backend_port;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$gw_port backlog=4096;
        location /pay/ {
            idem on;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_dedupe_wait 2s;
            idem_deadline 90s;
            $use
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_read_timeout 90s;
            proxy_pass http://backend/;
        }
    }
}
CONF
}

# one POST, on a connection of its own: [status, seconds]
sub post {
    my ($path, $id, $client) = @_;
    my $t0 = time;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$gw_port",
                                  Timeout => 90) or return [0, time - $t0];
    print $s "POST $path HTTP/1.0\r\nHost: gw\r\nX-Call-Id: $id\r\n"
             . "X-Client: $client\r\nContent-Length: 3\r\n\r\nx=1";
    my $line = <$s> // '';
    my ($status) = $line =~ m{^HTTP/1\.\d (\d+)};
    local $/;
    my $rest = <$s>;
    return [$status // 0, time - $t0];
}

# a well-behaved client: a new call, and a resend of it 20 ms later
sub good {
    my ($n, $tag, $until, $out) = @_;
    open my $fh, '>', $out or die_("$out: $!");
    my $k = 0;
    while (time < $until) {
        my $id = "$tag-g$n-" . $k++;
        my $pid = fork() // die_("fork: $!");
        if ($pid == 0) {
            my $r = post('/pay/fast', $id, "good-$n");
            print $fh "owner $r->[0] $r->[1]\n";
            POSIX::_exit(0);
        }
        sleep 0.02;
        my $r = post('/pay/fast', $id, "good-$n");
        print $fh "resend $r->[0] $r->[1]\n";
        waitpid($pid, 0);
        sleep 0.1;
    }
    close $fh;
}

# the storming client's loop on one call id
sub storm {
    my ($id, $until, $out) = @_;
    open my $fh, '>', $out or die_("$out: $!");
    while (time < $until) {
        my $r = post('/pay/slow', $id, 'storm');
        print $fh "$r->[0] $r->[1]\n";
        sleep 0.05;
    }
    close $fh;
}

sub pct {
    my ($p, @v) = @_;
    return 0 unless @v;
    @v = sort { $a <=> $b } @v;
    return $v[int($p * $#v + 0.5)];
}

sub one_run {
    my ($tag, $with_storm) = @_;
    my (@kids, @owners);
    my $rd = "$run/$tag";
    make_path($rd);

    if ($with_storm) {

        # the storm's owners, held at the backend for the whole run
        for my $i (1 .. 50) {
            my $pid = fork() // die_("fork: $!");
            if ($pid == 0) {
                post('/pay/slow', "$tag-s$i", 'storm-owner');
                POSIX::_exit(0);
            }
            push @owners, $pid;
        }
        sleep 0.5;
    }

    my $until = time + $secs;

    if ($with_storm) {
        for my $i (1 .. 50) {
            my $pid = fork() // die_("fork: $!");
            if ($pid == 0) {
                storm("$tag-s$i", $until, "$rd/storm-$i");
                POSIX::_exit(0);
            }
            push @kids, $pid;
        }
    }

    for my $n (1 .. 20) {
        my $pid = fork() // die_("fork: $!");
        if ($pid == 0) {
            good($n, $tag, $until, "$rd/good-$n");
            POSIX::_exit(0);
        }
        push @kids, $pid;
    }

    waitpid($_, 0) for @kids;
    kill 'KILL', @owners;
    waitpid($_, 0) for @owners;

    my (@lat, $resends, $r409, %storm, $storm_n);
    $resends = $r409 = $storm_n = 0;
    for my $f (glob "$rd/good-*") {
        open my $fh, '<', $f or next;
        while (<$fh>) {
            my ($kind, $st, $t) = split;
            push @lat, $t;
            next unless $kind eq 'resend';
            $resends++;
            $r409++ if $st == 409;
        }
    }
    for my $f (glob "$rd/storm-*") {
        open my $fh, '<', $f or next;
        while (<$fh>) {
            my ($st) = split;
            $storm{$st}++;
            $storm_n++;
        }
    }

    return {
        calls => scalar @lat,
        p50 => pct(0.5, @lat) * 1000,
        p99 => pct(0.99, @lat) * 1000,
        r409 => $resends ? 100 * $r409 / $resends : 0,
        storm_rate => $storm_n / $secs,
        storm => join(' ', map { "$_:$storm{$_}" } sort keys %storm),
    };
}

my @rows;

for my $case (['no storm', 0, 0], ['storm, no limit', 1, 0],
              ['storm, limit', 1, 1])
{
    my ($name, $with_storm, $limit) = @$case;
    (my $tag = $name) =~ s/\W+/-/g;

    if (open my $p, '<', "$run/gateway/logs/nginx.pid") {
        my $pid = <$p>;
        chomp $pid;
        kill 'QUIT', $pid;
        for (1 .. 100) { last unless kill 0, $pid; sleep 0.1 }
    }
    system("redis-cli -p $redis_port flushall >/dev/null");
    start_nginx('gateway', gateway_conf($limit));
    sleep 0.3;

    my $r = one_run($tag, $with_storm);
    push @rows, [$name, $r];
    printf STDERR "resend-storm: %s done\n", $name;
}

my $out = sprintf "%-16s %7s %8s %8s %10s %11s  %s\n", 'run', 'calls',
                  'p50 ms', 'p99 ms', '409 %', 'storm/s', 'storm answers';
for my $row (@rows) {
    my ($name, $r) = @$row;
    $out .= sprintf "%-16s %7d %8.1f %8.1f %10.1f %11.0f  %s\n", $name,
                    $r->{calls}, $r->{p50}, $r->{p99}, $r->{r409},
                    $r->{storm_rate}, $r->{storm} || '-';
}

$out .= "\nwell-behaved clients: 20, each a new call and a resend of it; "
        . "409 %: their resends answered 409 (call-in-flight: the wait "
        . "table, idem_dedupe_wait_max $wait_max, full); storm: one "
        . "client, 50 ids, its resends per second and their answers "
        . "(status:count)\n";

print $out;
open my $fh, '>', "$dir/result.txt" or die_("$dir/result.txt: $!");
print $fh $out;
close $fh;

exit 0;
