package FastCGIParams;

# A FastCGI responder of the tests' own: it answers every request with the
# HTTP_* params nginx sent, one "NAME=value" line each, sorted, so that a
# test sees the request a FastCGI backend gets (where "X-Call-Id-Source"
# and "X_Call_Id_Source" are the same variable).  It listens on a free
# port of loopback, exported as TEST_NGINX_FASTCGI_PORT, from the time the
# module is loaded until the test ends.

use strict;
use warnings;
use IO::Socket::INET;

my $parent = $$;
my $child;

sub import {
    return if $child;

    my $server = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                       LocalPort => 0, Listen => 16,
                                       ReuseAddr => 1)
        or die "FastCGIParams: cannot listen: $!\n";

    $ENV{TEST_NGINX_FASTCGI_PORT} = $server->sockport;

    $child = fork;
    die "FastCGIParams: fork: $!\n" unless defined $child;

    if ($child == 0) {
        $SIG{TERM} = sub { exit 0 };
        while (my $c = $server->accept) {
            serve($c);
            close $c;
        }
        exit 0;
    }

    close $server;
}

sub read_exactly {
    my ($c, $len) = @_;
    my $buf = '';
    while (length $buf < $len) {
        my $n = sysread($c, $buf, $len - length $buf, length $buf);
        return undef unless $n;
    }
    return $buf;
}

sub pair_length {
    my ($data, $pos) = @_;
    my $b = ord substr($$data, $$pos, 1);
    if ($b < 128) {
        $$pos += 1;
        return $b;
    }
    my $len = unpack('N', substr($$data, $$pos, 4)) & 0x7fffffff;
    $$pos += 4;
    return $len;
}

sub record {
    my ($type, $id, $content) = @_;
    return pack('CCnnCC', 1, $type, $id, length $content, 0, 0) . $content;
}

sub serve {
    my ($c) = @_;
    my ($params, $id) = ('', 1);

    while (1) {
        my $head = read_exactly($c, 8) // return;
        my ($version, $type, $rid, $len, $pad) = unpack('CCnnC', $head);
        my $content = $len ? read_exactly($c, $len) // return : '';
        read_exactly($c, $pad) // return if $pad;
        $id = $rid;

        $params .= $content if $type == 4;
        last if $type == 5 && $len == 0;    # the end of FCGI_STDIN
    }

    my ($pos, %p) = (0);
    while ($pos < length $params) {
        my $nlen = pair_length(\$params, \$pos);
        my $vlen = pair_length(\$params, \$pos);
        my $name = substr($params, $pos, $nlen);
        my $value = substr($params, $pos + $nlen, $vlen);
        $pos += $nlen + $vlen;
        push @{ $p{$name} }, $value;
    }

    my $body = join '', map { my $n = $_; map { "$n=$_\n" } @{ $p{$n} } }
                        grep { /^HTTP_/ } sort keys %p;

    my $out = "Content-Type: text/plain\r\n\r\n$body";
    syswrite($c, record(6, $id, $out) . record(6, $id, '')
                 . record(3, $id, pack('NCCCC', 0, 0, 0, 0, 0)));
}

END {
    if ($child && $$ == $parent) {
        kill 'TERM', $child;
        waitpid $child, 0;
    }
}

1;
