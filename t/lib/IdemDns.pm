package IdemDns;

# A DNS server of the tests' own, for upstream servers that nginx resolves
# at run time ("server name resolve" in a zone): every A query is answered
# 127.0.0.1, any other type with no records.  It listens on UDP
# TEST_NGINX_DNS_PORT, by default the number of the (TCP) backend port,
# which is already this run's own.  Started by "use IdemDns", it ends with
# the test file.
#
# With $IdemDns::Map set (before "use IdemDns", in a BEGIN block) to a
# file of "name address [ttl]" lines, read again at each query, a name in
# it is answered its address (TTL 3600 s unless given) and any other name
# NXDOMAIN: a test points a name elsewhere by writing the file (map()).

use strict;
use warnings;
use IO::Socket::INET;
use IO::Select;

our $Port = $ENV{TEST_NGINX_DNS_PORT} ||= $ENV{TEST_NGINX_BACKEND_PORT}
    or die "TEST_NGINX_BACKEND_PORT is not set\n";

our $Map;

# writes the map: name => "address" or [address, ttl]
sub map {
    my (%names) = @_;
    open my $fh, '>', "$Map.new" or die "$Map.new: $!\n";
    for my $name (sort keys %names) {
        my $v = $names{$name};
        print $fh join(' ', $name, ref $v ? @$v : $v), "\n";
    }
    close $fh;
    rename "$Map.new", $Map or die "$Map: $!\n";
}

# the map's entry for a name: (address, ttl), or () for NXDOMAIN
sub lookup {
    my ($name) = @_;
    open my $fh, '<', $Map or return ();
    while (<$fh>) {
        my ($n, $addr, $ttl) = split;
        return ($addr, $ttl // 3600) if defined $n && lc $n eq lc $name;
    }
    return ();
}

my $parent = $$;
my $child;

sub answer {
    my ($query) = @_;

    return undef if length $query < 12;

    my ($id, $flags, $qdcount) = unpack 'n n n', $query;
    return undef if $flags & 0x8000 || $qdcount != 1;

    # the question: labels, then type and class
    my $pos = 12;
    my @labels;
    while ($pos < length $query) {
        my $len = ord substr $query, $pos, 1;
        push @labels, substr $query, $pos + 1, $len if $len;
        $pos += 1 + $len;
        last if $len == 0;
    }
    return undef if $pos + 4 > length $query;

    my $question = substr $query, 12, $pos + 4 - 12;
    my ($type) = unpack 'n', substr $query, $pos, 2;
    my $a = $type == 1;

    my ($addr, $ttl) = ('127.0.0.1', 3600);

    if (defined $Map) {
        ($addr, $ttl) = lookup(join '.', @labels);

        # not in the map: NXDOMAIN
        return pack('n n n n n n', $id, 0x8183, 1, 0, 0, 0) . $question
            unless defined $addr;
    }

    my $reply = pack('n n n n n n', $id, 0x8180, 1, $a ? 1 : 0, 0, 0)
                . $question;

    # the name by a pointer to the question's
    $reply .= pack('n n n N n C4', 0xc00c, 1, 1, $ttl, 4, split /\./, $addr)
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
