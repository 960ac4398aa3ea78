package IdemDns;

# A DNS server of the tests' own, for upstream servers that nginx resolves
# at run time ("server name resolve" in a zone): every A query is answered
# 127.0.0.1, any other type with no records.  It listens on UDP
# TEST_NGINX_DNS_PORT, by default the number of the (TCP) backend port,
# which is already this run's own.  Started by "use IdemDns", it ends with
# the test file.

use strict;
use warnings;
use IO::Socket::INET;
use IO::Select;

our $Port = $ENV{TEST_NGINX_DNS_PORT} ||= $ENV{TEST_NGINX_BACKEND_PORT}
    or die "TEST_NGINX_BACKEND_PORT is not set\n";

my $parent = $$;
my $child;

sub answer {
    my ($query) = @_;

    return undef if length $query < 12;

    my ($id, $flags, $qdcount) = unpack 'n n n', $query;
    return undef if $flags & 0x8000 || $qdcount != 1;

    # the question: labels, then type and class
    my $pos = 12;
    while ($pos < length $query) {
        my $len = ord substr $query, $pos, 1;
        $pos += 1 + $len;
        last if $len == 0;
    }
    return undef if $pos + 4 > length $query;

    my $question = substr $query, 12, $pos + 4 - 12;
    my ($type) = unpack 'n', substr $query, $pos, 2;
    my $a = $type == 1;

    my $reply = pack('n n n n n n', $id, 0x8180, 1, $a ? 1 : 0, 0, 0)
                . $question;

    # the name by a pointer to the question's, TTL 1 hour, 127.0.0.1
    $reply .= pack('n n n N n C4', 0xc00c, 1, 1, 3600, 4, 127, 0, 0, 1)
        if $a;

    return $reply;
}

sub serve {
    my ($sock) = @_;
    my $sel = IO::Select->new($sock);

    while (getppid() == $parent) {
        next unless $sel->can_read(0.5);
        my $peer = $sock->recv(my $query, 512) or next;
        my $reply = answer($query) or next;
        $sock->send($reply, 0, $peer);
    }

    exit 0;
}

sub import {
    return if $child;

    # bound before nginx starts: its first query is not lost
    my $sock = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                     LocalPort => $Port, Proto => 'udp',
                                     ReuseAddr => 1)
        or die "DNS on udp $Port: $!\n";

    $child = fork;
    die "fork: $!\n" unless defined $child;
    serve($sock) if $child == 0;
    close $sock;
}

END {
    # $? is the test file's exit status here: waitpid must not change it
    local $?;

    if ($child && $$ == $parent) {
        kill 'TERM', $child;
        waitpid $child, 0;
    }
}

1;
