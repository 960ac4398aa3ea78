package IdemGateway;

# Gateways of the tests that need real nginx masters (t/110, t/185,
# t/195): nginx with a master process and two workers on a port of their
# own, with the idem_redis line given, and plain-socket clients that send
# many requests at once.

use strict;
use warnings;
use IO::Socket::INET;
use IO::Select;
use File::Path qw(make_path remove_tree);
use Time::HiRes qw(sleep time);
use Cwd qw(abs_path);
use Exporter qw(import);

# what a test may import; t/185 and t/195 call them by their full names
our @EXPORT_OK = qw(send_all post get is_original is_duplicate summary);

our $Timeout = 10;

my $root = abs_path(__FILE__ =~ m{^(.*)/t/lib/} ? $1 : '.');
my $nginx = $ENV{TEST_NGINX_BINARY} || 'nginx';
my @modules = split ' ', ($ENV{TEST_NGINX_LOAD_MODULES} || '');
my %master;

sub servroot { "$root/t/servroot-store-$_[0]" }

# start($port, $idem_redis_line, $backend_port, %opt): the gateway's
# locations
#   /d        dedupe, call id required, to the backend's /sleep/MS/1
#   /q        dedupe, call id required, to the backend's /ok
#   /s        as /q, scoped by the Authorization header
#   /t        records only, to the backend's /ok
#   /w        as /q, with "idem_dedupe_durable $opt{durable}" (only
#             with that option)
#   /_idem/calls/  status
# %opt: sleep => MS (300), log => the error_log level (debug), wait =>
# idem_dedupe_wait on /d and /q (none), durable => idem_dedupe_durable's
# parameters (a location /w).  Dies if nginx does not start.
sub start {
    my ($port, $redis, $backend, %opt) = @_;
    my $sr = servroot($port);
    my $sleep = $opt{sleep} // 300;
    my $level = $opt{log} // 'debug';
    my $wait = $opt{wait} ? "idem_dedupe_wait $opt{wait};" : '';
    my $durable = !defined $opt{durable} ? '' : <<"LOC";
        location /w {
            idem on;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_dedupe_durable $opt{durable};
            proxy_pass http://127.0.0.1:$backend/ok;
        }
LOC

    remove_tree($sr);
    make_path("$sr/conf", "$sr/logs");

    my $load = join '', map { "load_module $_;\n" } @modules;
    my $user = $> == 0 ? "user root;\n" : '';

    open my $fh, '>', "$sr/conf/nginx.conf" or die "$sr/conf/nginx.conf: $!";
    print $fh <<"CONF";
${load}${user}worker_processes 2;
master_process on;
daemon on;
error_log $sr/logs/error.log $level;
pid $sr/logs/nginx.pid;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $sr/client_body_temp;
    proxy_temp_path $sr/proxy_temp;
    fastcgi_temp_path $sr/fastcgi_temp;
    uwsgi_temp_path $sr/uwsgi_temp;
    scgi_temp_path $sr/scgi_temp;
    $redis;
    server {
        listen 127.0.0.1:$port;
        location /d {
            idem on;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_status_url /_idem/calls/;
            $wait
            proxy_pass http://127.0.0.1:$backend/sleep/$sleep/1;
        }
        location /q {
            idem on;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            $wait
            proxy_pass http://127.0.0.1:$backend/ok;
        }
        location /s {
            idem on;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope \$http_authorization;
            proxy_pass http://127.0.0.1:$backend/ok;
        }
        location /t {
            idem on;
            idem_record on;
            proxy_pass http://127.0.0.1:$backend/ok;
        }
${durable}        location /_idem/calls/ {
            idem_status;
        }
    }
}
CONF
    close $fh;

    my $out = `$nginx -p $sr/ -c $sr/conf/nginx.conf -e $sr/logs/error.log 2>&1`;
    die "nginx on :$port does not start: $out\n" if $?;

    for (1 .. 100) {
        last if IO::Socket::INET->new("127.0.0.1:$port");
        sleep 0.1;
    }

    my $pid = slurp("$sr/logs/nginx.pid");
    chomp $pid;
    die "no master pid for :$port\n" unless $pid =~ /^\d+$/;
    $master{$port} = $pid;
    return $pid;
}

# QUIT every master still running and wait for it (then TERM, then KILL)
sub stop_all {
    for my $port (sort keys %master) {
        my $pid = delete $master{$port};
        kill 'QUIT', $pid;
        for my $sig ('TERM', 'KILL', undef) {
            for (1 .. 100) {
                last unless kill 0, $pid;
                sleep 0.1;
            }
            last unless kill 0, $pid;
            kill $sig, $pid if defined $sig;
        }
    }
}

# the lines of a gateway's log that say something went wrong
sub bad_lines {
    my ($port, $allow) = @_;
    my $log = slurp(servroot($port) . '/logs/error.log');
    return grep { !($allow && /$allow/) }
           grep { /\[(?:alert|crit|emerg|error)\]|exited on signal/ }
           split /\n/, $log;
}

sub log_text { slurp(servroot($_[0]) . '/logs/error.log') }

sub post {
    my ($id, $body, $uri) = @_;
    $uri //= '/d';
    return "POST $uri HTTP/1.0\r\nHost: localhost\r\nX-Call-Id: $id\r\n"
           . "Content-Type: application/json\r\n"
           . 'Content-Length: ' . length($body) . "\r\n\r\n$body";
}

sub get {
    my ($uri, $id) = @_;
    return "GET $uri HTTP/1.0\r\nHost: localhost\r\n"
           . (defined $id ? "X-Call-Id: $id\r\n" : '') . "\r\n";
}

# Sends every [port, request] at once: connects them all, writes them all,
# then reads every answer to EOF.  The parsed answers, in order (undef for
# one that could not be sent or did not finish in time).
sub send_all {
    my @todo = @_;
    my (@socks, %buf, %idx);

    for my $i (0 .. $#todo) {
        $socks[$i] = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$todo[$i][0]",
                                           Timeout => $Timeout);
    }
    for my $i (0 .. $#todo) {
        my $s = $socks[$i] or next;
        my $req = $todo[$i][1];
        $socks[$i] = undef if (syswrite($s, $req) // -1) != length $req;
    }

    my $sel = IO::Select->new;
    for my $i (0 .. $#socks) {
        next unless $socks[$i];
        $sel->add($socks[$i]);
        $idx{$socks[$i]} = $i;
        $buf{$i} = '';
    }

    my (@res, %done);
    my $end = time + $Timeout;
    while ($sel->count && time < $end) {
        for my $s ($sel->can_read($end - time)) {
            my $i = $idx{$s};
            my $n = sysread($s, $buf{$i}, 65536, length $buf{$i});
            next if defined $n && $n > 0;
            $sel->remove($s);
            close $s;
            $done{$i} = 1;
        }
    }

    $res[$_] = $done{$_} ? parse($buf{$_}) : undef for 0 .. $#todo;
    return wantarray ? @res : $res[0];
}

sub parse {
    my ($raw) = @_;
    my ($head, $body) = split /\r\n\r\n/, $raw, 2;
    return undef unless defined $body;
    my ($line, @fields) = split /\r\n/, $head;
    my ($status) = $line =~ m{^HTTP/1\.[01] (\d{3})} or return undef;
    my %h;
    for (@fields) {
        my ($k, $v) = /^([^:]+):\s*(.*)$/ or next;
        $k = lc $k;
        # a repeated header shows as one "a, b": a test of its value fails
        $h{$k} = defined $h{$k} ? "$h{$k}, $v" : $v;
    }
    return { status => $status, h => \%h, body => $body, raw => $raw };
}

sub is_original {
    my ($r) = @_;
    return defined $r && $r->{status} == 200
           && !exists $r->{h}{'idempotent-replayed'};
}

sub is_duplicate {
    my ($r) = @_;
    return defined $r
           && (($r->{status} == 409
                && $r->{body} =~ /problem:call-in-flight/)
               || ($r->{status} == 200
                   && ($r->{h}{'idempotent-replayed'} // '') eq 'true'));
}

# what the backend logged of the call: a line per execution
sub backend_log {
    my ($backend, $id) = @_;
    my $r = send_all([$backend, get("/log/$id")]);
    return defined $r && $r->{status} == 200 ? $r->{body} : '';
}

sub backend_runs {
    my ($backend, $id) = @_;
    return scalar grep { length } split /\n/, backend_log($backend, $id);
}

sub summary {
    my %n;
    for my $r (@_) {
        my $k = !defined $r ? 'none'
              : $r->{status} == 200
                ? (exists $r->{h}{'idempotent-replayed'} ? '200 replay' : '200')
              : $r->{status};
        $n{$k}++;
    }
    return join ', ', map { "$n{$_} x $_" } sort keys %n;
}

# CRC16 (XMODEM) of a key's hash tag: its Redis Cluster slot
sub slot {
    my ($key) = @_;
    $key = $1 if $key =~ /\{([^}]+)\}/;
    my $crc = 0;
    for my $c (unpack 'C*', $key) {
        $crc ^= $c << 8;
        for (1 .. 8) {
            $crc = $crc & 0x8000 ? (($crc << 1) ^ 0x1021) : ($crc << 1);
            $crc &= 0xffff;
        }
    }
    return $crc & 16383;
}

sub slurp {
    my ($f) = @_;
    open my $fh, '<', $f or return '';
    local $/;
    return scalar <$fh>;
}

1;
