package IdemGateway;

# Gateways of the tests that need real nginx masters (t/110, t/185,
# t/195): nginx with a master process and two workers on a port of their
# own (run by t/lib/IdemNginx.pm), with the idem_redis line given, and
# plain-socket clients that send many requests at once.

use strict;
use warnings;
use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw(sleep time);
use Exporter qw(import);
use IdemNginx;

# what a test may import; t/185 and t/195 call them by their full names
our @EXPORT_OK = qw(send_all post get is_original is_duplicate summary);

our $Timeout = 10;

my %running;        # port: its IdemNginx

sub servroot { IdemNginx::root() . "/t/servroot-store-$_[0]" }

# start($port, $idem_redis_line, $backend_port, %opt): the gateway's
# locations
#   /d        dedupe, call id required, to the backend's /sleep/MS/1
#             (/hold/1 with the option hold)
#   /q        dedupe, call id required, to the backend's /ok
#   /s        as /q, scoped by the Authorization header
#   /t        records only, to the backend's /ok
#   /w        as /q, with "idem_dedupe_durable $opt{durable}" (only
#             with that option)
#   /_idem/calls/  status
# %opt: sleep => MS (300), hold => 1 (/d's first request of a call id is
# held until the test releases it), log => the error_log level (debug),
# wait => idem_dedupe_wait on /d and /q (none), durable =>
# idem_dedupe_durable's parameters (a location /w).  Dies if nginx does
# not start.
sub start {
    my ($port, $redis, $backend, %opt) = @_;
    my $slow = $opt{hold} ? '/hold/1'
               : '/sleep/' . ($opt{sleep} // 300) . '/1';
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

    my $ng = IdemNginx->new(name => 'store', port => $port, workers => 2,
                            log_level => $level,
                            worker_connections => 1024);

    $ng->write_conf(<<"HTTP");
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
            proxy_pass http://127.0.0.1:$backend$slow;
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
HTTP

    $ng->start or die "nginx on :$port does not start: " . $ng->out . "\n";

    my $pid = $ng->master;
    die "no master pid for :$port\n" unless defined $pid;
    $running{$port} = $ng;
    return $pid;
}

# QUIT every master still running and wait for it (then TERM, then KILL)
sub stop_all {
    for my $port (sort keys %running) {
        delete($running{$port})->stop_hard;
    }
}

# the lines of a gateway's log that say something went wrong
sub bad_lines {
    my ($port, $allow) = @_;
    return IdemNginx::bad_lines_in(log_text($port), with_error => 1,
                                   allow => $allow);
}

sub log_text { IdemNginx::slurp(servroot($_[0]) . '/logs/error.log') }

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

1;
