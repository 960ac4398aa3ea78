#!/usr/bin/perl
# A misbehaving HTTP backend for the tests, one process per connection.
#
#   backend.pl PORT STATE_DIR
#
# Every request is appended to STATE_DIR/<call id> ("n=<k> attempt=<X-Call-Attempt>
# deadline=<X-Deadline-Ms> tp=<traceparent> method=<m> body=<body>"), so that a
# call's attempts can be counted.  k is the number of requests seen for that
# call id, this one included.  The path says how to behave:
#
#   /ok                      200, the call's log as the body
#   /status/CODE/K[/RA]      the first K requests of a call id answer CODE
#                            (with "Retry-After: RA" when given), later 200
#   /reset/K                 the first K requests of a call id: read the
#                            request, then reset the connection; later 200
#   /close/K                 the same, closing without an answer
#   /sleep/MS/K              the first K requests of a call id sleep MS ms
#                            before answering 200; later 200 at once
#   /drip/MS/K               the first K requests of a call id get the 200's
#                            header at once and its body (the log) MS ms
#                            later; later 200 at once
#   /grpc/CODE/K[/PB]        gRPC, Trailers-Only style: the first K requests
#                            of a call id answer 200 with "grpc-status: CODE"
#                            (and "grpc-retry-pushback-ms: PB" when given),
#                            later 200 with "grpc-status: 0" and the log
#   /hold/K[/PATH]           the first K requests of a call id are held
#                            until the call is released (at most 60 s), then
#                            answered as PATH says (200 without one); later
#                            ones at once: a test decides when an owner ends,
#                            once what it waits for has happened
#   /release/ID              releases call id ID's held requests (200)
#   /log/ID                  the log of call id ID (200, empty when none)

use strict;
use warnings;
use IO::Socket::INET;
use Socket qw(SOL_SOCKET SO_LINGER);
use Fcntl qw(:flock);
use Time::HiRes qw(sleep);

my ($port, $dir) = @ARGV;
die "usage: $0 PORT STATE_DIR\n" unless $port && $dir;
mkdir $dir;

$SIG{CHLD} = 'IGNORE';

my $server = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                   LocalPort => $port, Listen => 128,
                                   ReuseAddr => 1)
    or die "listen on $port: $!\n";

while (1) {
    my $c = $server->accept or next;
    my $pid = fork;
    if (!defined $pid) { close $c; next; }
    if ($pid == 0) {
        close $server;
        serve($c);
        exit 0;
    }
    close $c;
}

sub serve {
    my ($c) = @_;
    local $/ = "\r\n";
    my $line = <$c>;
    return unless defined $line;
    my ($method, $uri) = split ' ', $line;
    my %h;
    while (my $l = <$c>) {
        last if $l eq "\r\n";
        $l =~ s/\r\n$//;
        my ($k, $v) = split /:\s*/, $l, 2;
        $h{lc $k} = $v;
    }
    my $body = '';
    if (my $len = $h{'content-length'}) {
        read($c, $body, $len);
    }

    my $id = $h{'x-call-id'} // 'none';
    $id =~ s/[^A-Za-z0-9._~:-]/_/g;

    if ($uri =~ m{^/log/([A-Za-z0-9._~:-]+)}) {
        return answer($c, 200, {}, slurp("$dir/$1"));
    }

    if ($uri =~ m{^/release/([A-Za-z0-9._~:-]+)}) {
        mkdir "$dir/released";
        open my $fh, '>', "$dir/released/$1" or die "$dir/released/$1: $!";
        close $fh;
        return answer($c, 200, {}, "released\n");
    }

    my $n = record($id, sprintf "attempt=%s deadline=%s tp=%s method=%s body=%s",
                   map { $_ // '-' } $h{'x-call-attempt'}, $h{'x-deadline-ms'},
                   $h{traceparent}, $method, $body);

    # held until the test releases the call, then as the rest of the path
    if ($uri =~ m{^/hold/(\d+)(/.*)?}) {
        my ($k, $rest) = ($1, $2);
        if ($n <= $k) {
            for (1 .. 6000) {
                last if -e "$dir/released/$id";
                sleep 0.01;
            }
        }
        $uri = $rest // '/ok';
    }

    if ($uri =~ m{^/status/(\d+)/(\d+)(?:/(\d+))?}) {
        if ($n <= $2) {
            return answer($c, $1, defined $3 ? { 'Retry-After' => $3 } : {},
                          "failing $n\n");
        }
    } elsif ($uri =~ m{^/(reset|close)/(\d+)}) {
        if ($n <= $2) {
            setsockopt($c, SOL_SOCKET, SO_LINGER, pack('ii', 1, 0))
                if $1 eq 'reset';
            close $c;
            return;
        }
    } elsif ($uri =~ m{^/sleep/(\d+)/(\d+)}) {
        sleep($1 / 1000) if $n <= $2;
    } elsif ($uri =~ m{^/drip/(\d+)/(\d+)}) {
        if ($n <= $2) {
            my $log = slurp("$dir/$id");
            $c->autoflush(1);
            print $c "HTTP/1.1 200 X\r\nContent-Length: " . length($log)
                     . "\r\nConnection: close\r\n\r\n";
            sleep($1 / 1000);
            print $c $log;
            close $c;
            return;
        }
    } elsif ($uri =~ m{^/grpc/(\d+)/(\d+)(?:/(-?\d+))?}) {
        my %g = ('Content-Type' => 'application/grpc');
        if ($n <= $2) {
            $g{'grpc-status'} = $1;
            $g{'grpc-message'} = "failing $n";
            $g{'grpc-retry-pushback-ms'} = $3 if defined $3;
            return answer($c, 200, \%g, '');
        }
        $g{'grpc-status'} = 0;
        return answer($c, 200, \%g, slurp("$dir/$id"));
    }

    answer($c, 200, {}, slurp("$dir/$id"));
}

# appends a line to the call's log; returns how many lines it now has
sub record {
    my ($id, $what) = @_;
    local $/ = "\n";
    open my $fh, '+>>', "$dir/$id" or die "$dir/$id: $!";
    flock $fh, LOCK_EX;
    seek $fh, 0, 0;
    my @lines = <$fh>;
    my $n = @lines + 1;
    print $fh "n=$n $what\n";
    close $fh;
    return $n;
}

sub slurp {
    my ($f) = @_;
    open my $fh, '<', $f or return '';
    local $/;
    return scalar <$fh>;
}

sub answer {
    my ($c, $status, $headers, $body) = @_;
    my $out = "HTTP/1.1 $status X\r\nContent-Length: " . length($body)
              . "\r\nConnection: close\r\n";
    $out .= "$_: $headers->{$_}\r\n" for sort keys %$headers;
    print $c "$out\r\n$body";
    close $c;
}
