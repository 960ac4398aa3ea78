package FakeRedisCluster;

# A Redis Cluster node that lies (t/186-redis-cluster-replies.t): it
# claims all 16384 slots in CLUSTER SLOTS, and answers every other
# command by the call id in its key:
#
#   ...{moved-self...}   -MOVED <slot> 127.0.0.1:<its own port> (a loop)
#   ...{ask-self...}     -ASK <slot> 127.0.0.1:<its own port> (a loop)
#   ...{bad-moved...}    -MOVED 12 (no address)
#   ...{bad-slot...}     -MOVED 99999 127.0.0.1:<port>
#   ...{bad-port...}     -ASK 12 127.0.0.1:0
#   ...{host-name...}    -MOVED 12 localhost:<port>
#   ...{colons...}       -MOVED 12 ::::
#   ...{space...}        -MOVED 12<space>
#   ...{down...}         -MOVED 12 127.0.0.1:1 (nothing listens there)
#   ...{moved-next...}   -MOVED 12 127.0.0.1:<its own port + 1>
#   ...{ask-next...}     -ASK 12 127.0.0.1:<its own port + 1>
#   anything else        -ERR fake
#
# One process per connection, like util/backend.pl; start() may run
# several nodes, stop() ends them all.

use strict;
use warnings;
use IO::Socket::INET;
use POSIX ();

my @pids;

# start($port [, $reply]): $reply(\@args, $port) answers each command
sub start {
    my ($port, $reply) = @_;
    $reply ||= \&reply;
    my $server = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                       LocalPort => $port, Listen => 64,
                                       ReuseAddr => 1)
        or die "fake redis: listen on $port: $!\n";
    my $pid = fork;
    die "fork: $!\n" unless defined $pid;
    if ($pid) {
        close $server;
        push @pids, $pid;
        return $pid;
    }
    $SIG{CHLD} = 'IGNORE';
    while (1) {
        my $c = $server->accept or next;
        my $child = fork;
        next unless defined $child;
        if ($child) {
            close $c;
            next;
        }
        close $server;
        serve($c, $port, $reply);
        POSIX::_exit(0);
    }
}

sub stop {
    kill 'TERM', @pids if @pids;
    waitpid $_, 0 for @pids;
    @pids = ();
}

sub serve {
    my ($c, $port, $reply) = @_;
    my $buf = '';
    while (1) {
        my $n = sysread($c, $buf, 65536, length $buf);
        return unless $n;
        while (defined(my $args = parse(\$buf))) {
            syswrite($c, $reply->($args, $port));
        }
    }
}

# one command off the front of the buffer, undef while incomplete
sub parse {
    my ($buf) = @_;
    return undef unless $$buf =~ /\A\*(\d+)\r\n/;
    my ($n, $pos) = ($1, length "*$1\r\n");
    my @args;
    for (1 .. $n) {
        my $head = substr($$buf, $pos);
        return undef unless $head =~ /\A\$(\d+)\r\n/;
        my $len = $1;
        $pos += length("\$$len\r\n");
        return undef if length($$buf) < $pos + $len + 2;
        push @args, substr($$buf, $pos, $len);
        $pos += $len + 2;
    }
    substr($$buf, 0, $pos) = '';
    return \@args;
}

# CLUSTER SLOTS: every slot on 127.0.0.1:$port, whose node id is 40 of $c
sub slots {
    my ($port, $c) = @_;
    return "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n\$9\r\n127.0.0.1\r\n"
           . ":$port\r\n\$40\r\n" . ($c x 40) . "\r\n";
}

sub reply {
    my ($args, $port) = @_;
    my $cmd = uc $args->[0];
    return "+OK\r\n" if $cmd eq 'AUTH' || $cmd eq 'ASKING';
    return slots($port, 'f') if $cmd eq 'CLUSTER';
    my $key = ($cmd =~ /^EVAL/ ? $args->[3] : $args->[1]) // '';
    return "-MOVED 12 127.0.0.1:$port\r\n" if $key =~ /moved-self/;
    return "-ASK 12 127.0.0.1:$port\r\n"   if $key =~ /ask-self/;
    return "-MOVED 12\r\n"                 if $key =~ /bad-moved/;
    return "-MOVED 99999 127.0.0.1:$port\r\n" if $key =~ /bad-slot/;
    return "-ASK 12 127.0.0.1:0\r\n"       if $key =~ /bad-port/;
    return "-MOVED 12 localhost:$port\r\n" if $key =~ /host-name/;
    return "-MOVED 12 ::::\r\n"            if $key =~ /colons/;
    return "-MOVED 12 \r\n"                if $key =~ /space/;
    return "-MOVED 12 127.0.0.1:1\r\n"     if $key =~ /down/;
    return "-MOVED 12 127.0.0.1:" . ($port + 1) . "\r\n"
        if $key =~ /moved-next/;
    return "-ASK 12 127.0.0.1:" . ($port + 1) . "\r\n"
        if $key =~ /ask-next/;
    return "-ERR fake\r\n";
}

1;
