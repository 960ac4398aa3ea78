package IdemTestNginx::Client;

# The HTTP client side: turning --- request text into bytes the way the real
# Test::Nginx does, sending them, reading the reply and parsing it.

use strict;
use warnings;

use Errno qw(EAGAIN EINTR EWOULDBLOCK);
use HTTP::Response ();
use IO::Select ();
use IO::Socket::INET ();
use Time::HiRes qw(sleep time);

use IdemTestNginx::Config;

# "Name: value" lines (# comments skipped) -> header text with CRLFs, and
# whether they ask for a chunked request body.
sub parse_more_headers {
    my ($text) = @_;

    my ($out, $chunked) = ('', 0);

    for my $line (split /\n+/, $text // '') {
        next if $line =~ /^\s*#/;

        my ($key, $val) = split /:\s*/, $line, 2;
        $val //= '';
        $chunked = 1 if lc $key eq 'transfer-encoding' && $val eq 'chunked';
        $out .= "$key: $val\r\n";
    }

    return ($out, $chunked);
}

# One --- request value ("METHOD [URI [HTTP/x.y]]" then an optional body) ->
# the request bytes.  Host and Connection: close are added unless
# more_headers has them, Content-Length when there is a body (which is then
# trimmed, as the real one does).
sub build_request {
    my ($spec, $more_headers) = @_;

    die "empty --- request\n" unless defined $spec;

    # Leading blank and "# comment" lines.
    1 while $spec =~ s/^\s*#[^\n]*\n|^\s+//;

    my ($first, $body) = split /\n/, $spec, 2;

    die "empty --- request\n" unless defined $first && length $first;

    my ($method, $uri, $version, $extra) = split ' ', $first;

    die "request line should be \"METHOD [URI [VERSION]]\": \"$first\"\n"
        if defined $extra;

    $uri //= '/';
    $version //= 'HTTP/1.1';
    $body //= '';

    my ($headers, $chunked) = parse_more_headers($more_headers);

    my $added = '';

    $added .= "Host: $ServerName\r\n" if $headers !~ /(?:^|\n)Host:/i;
    $added .= "Connection: close\r\n" if $headers !~ /(?:^|\n)Connection/i;

    my $length = '';

    if ($body ne '' && !$chunked && $headers !~ /(?:^|\n)Content-Length:/) {
        $body =~ s/^\s+|\s+$//g;
        $length = "Content-Length: " . length($body) . "\r\n";
    }

    return "$method $uri $version\r\n$added$headers$length\r\n$body";
}

# Sends the bytes and reads until the server closes the connection.
# $timeout is an idle timeout: the longest wait for any single read or
# write, as in the real Test::Nginx.  Returns a hash: response (the bytes
# read), timed_out, error (could not connect).
sub send_request {
    my ($bytes, $timeout) = @_;

    local $SIG{PIPE} = 'IGNORE';

    my $sock = connect_server($timeout)
        or return { response => '',
                    error => "Can't connect to $ServerAddr:$ServerPort: $@" };

    $sock->blocking(0);

    my $sel = IO::Select->new($sock);
    my ($written, $response, $timed_out) = (0, '', 0);

    while (1) {
        my $want_write = $written < length $bytes;
        $! = 0;
        my ($r, $w) = IO::Select->select($sel, $want_write ? $sel : undef,
                                         undef, $timeout);

        if (!$r && !$w) {
            next if $! == EINTR;
            $timed_out = 1;
            last;
        }

        if ($w && @$w) {
            my $n = syswrite $sock, $bytes, length($bytes) - $written,
                             $written;
            if (defined $n) {
                $written += $n;
            } elsif ($! != EAGAIN && $! != EWOULDBLOCK) {
                # nginx may answer (413, 400 ...) and close before reading
                # all of it: stop writing, keep reading.
                $written = length $bytes;
            }
        }

        if ($r && @$r) {
            my $n = sysread $sock, my $buf, 65536;
            if (!defined $n) {
                next if $! == EAGAIN || $! == EWOULDBLOCK;
                last;    # reset by peer: keep what we have
            }
            last if $n == 0;
            $response .= $buf;
        }
    }

    close $sock;

    return { response => $response, timed_out => $timed_out };
}

# nginx under valgrind may be listening before it accepts: retry briefly.
sub connect_server {
    my ($timeout) = @_;

    my $deadline = time + $timeout;

    while (1) {
        my $sock = IO::Socket::INET->new(PeerAddr => $ServerAddr,
                                         PeerPort => $ServerPort,
                                         Proto    => 'tcp',
                                         Timeout  => $timeout);
        return $sock if $sock;
        return undef if time >= $deadline;
        sleep 0.1;
    }
}

# Raw response bytes -> (HTTP::Response, the raw header text, an error, a
# warning).  A chunked body is decoded: the checks compare the decoded body.
# A bad chunked body is an error, a short one only a warning (as in the real
# Test::Nginx).
sub parse_response {
    my ($raw, $is_head) = @_;

    my $raw_headers = $raw =~ /(.*?\r\n)\r\n/s ? $1 : '';

    my $res = HTTP::Response->parse($raw);

    $res->code(undef) if defined $res->code && $res->code !~ /^\d+$/;

    my $code = $res->code // 0;

    return ($res, $raw_headers) if $code == 304 || $code == 101;

    my $te = $res->header('Transfer-Encoding');
    my $len = $res->header('Content-Length');

    if (defined $te && $te eq 'chunked') {
        my ($body, $err) = decode_chunked($res->content // '');
        return ($res, $raw_headers, "invalid chunked body: $err")
            if defined $err;
        $res->content($body);

    } elsif (defined $len && $len =~ /^\d+$/ && !$is_head) {
        my $got = length($res->content // '');
        return ($res, $raw_headers, undef,
                "response body truncated: $len bytes expected, got $got")
            if $got < $len;
        $res->content(substr $res->content, 0, $len) if $got > $len;
    }

    return ($res, $raw_headers);
}

# Returns (body) or (undef, what is wrong).
sub decode_chunked {
    my ($raw) = @_;

    my $body = '';

    while (1) {
        return (undef, "no last chunk found")
            if (pos($raw) // 0) >= length $raw;

        $raw =~ /\G[ \t]*([0-9A-Fa-f]+)[^\r\n]*\r\n/gc
            or return (undef, "invalid chunk size line");

        my $size = hex $1;
        my $at = pos $raw;

        if ($size == 0) {
            # Trailer fields, then the final CRLF.
            $raw =~ /\G(?:[^\r\n]+\r\n)*\r\n/gc
                or return (undef, "no CRLF after the last chunk");
            return ($body);
        }

        return (undef, "not enough octets for the data section")
            if length($raw) - $at < $size + 2;

        return (undef, "no CRLF after chunk data")
            if substr($raw, $at + $size, 2) ne "\r\n";

        $body .= substr $raw, $at, $size;
        pos($raw) = $at + $size + 2;
    }
}

1;
