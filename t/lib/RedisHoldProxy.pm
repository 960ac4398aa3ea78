package RedisHoldProxy;

# A TCP proxy in front of a redis-server that can hold back replies, for
# a block that needs a reply to reach nginx after a command nginx sent
# later (t/113: a claim answered while a WAIT sent after it is in flight).
# It reads both directions as RESP (commands: arrays of bulk strings, as
# hiredis sends them; replies: RESP2), so that it knows which reply
# answers which command.
#
#   my $pid = RedisHoldProxy::start($listen_port, $redis_port, $control);
#   RedisHoldProxy::arm($control, 'id-1', 'id-2');   # one hold, see below
#   RedisHoldProxy::stop($pid);
#
# start(..., refuse_set_get => 1) answers a SET with both NX and GET as
# Redis 5 and 6 do ("ERR syntax error", nothing set): Redis is sent a SET
# it refuses in its place, so that the replies stay in order; and a
# PEXPIRE with a condition (NX, XX, GT, LT: Redis 7.0) the same way ("ERR
# wrong number of arguments", the expiry left as it is).
#
# Armed with two strings A and B, on the first connection that has sent a
# WAIT before (a durable claims' one) and then sends a command naming A:
# the replies of that connection wait until it sends a command naming B;
# then the replies to the commands sent before that one go, and the
# others wait until it sends a WAIT, then go too.  Once only: the control
# file is removed when the hold is over.  Every other reply goes at once.

use strict;
use warnings;
use IO::Socket::INET;
use IO::Select;
use POSIX ();
use Time::HiRes qw(sleep);

sub start {
    my ($listen, $redis, $control, %opt) = @_;

    unlink $control;

    my $srv = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                    LocalPort => $listen, Listen => 64,
                                    ReuseAddr => 1, Proto => 'tcp')
        or die "proxy: listen on $listen: $!\n";

    my $pid = fork() // die "fork: $!";
    if ($pid) {
        close $srv;
        return $pid;
    }

    eval { serve($srv, $redis, $control, \%opt) };
    POSIX::_exit(0);
}

sub stop {
    my ($pid) = @_;
    return unless $pid;
    kill 'KILL', $pid;
    waitpid($pid, 0);
}

# the hold, armed for one connection: what A and B are
sub arm {
    my ($control, $a, $b) = @_;
    open my $fh, '>', "$control.tmp" or die "$control: $!";
    print $fh "$a $b\n";
    close $fh;
    rename "$control.tmp", $control or die "$control: $!";
}

# one command of hiredis (an array of bulk strings): its arguments and
# its length in $buf, or nothing while it is not whole
sub command {
    my ($buf) = @_;
    return unless $buf =~ /\A\*(\d+)\r\n/;
    my ($n, $pos, @args) = ($1, length("*$1\r\n"));
    for (1 .. $n) {
        return unless substr($buf, $pos) =~ /\A\$(\d+)\r\n/;
        my $len = $1;
        $pos += length("\$$len\r\n");
        return if length($buf) < $pos + $len + 2;
        push @args, substr($buf, $pos, $len);
        $pos += $len + 2;
    }
    return (\@args, $pos);
}

# the length of one whole RESP2 reply at $pos of $buf, or undef
sub reply {
    my ($buf, $pos) = @_;
    my $end = index($buf, "\r\n", $pos);
    return if $end < 0;
    my $type = substr($buf, $pos, 1);
    my $line = substr($buf, $pos + 1, $end - $pos - 1);
    my $next = $end + 2;
    if ($type eq '$') {
        return $next - $pos if $line < 0;
        return if length($buf) < $next + $line + 2;
        return $next + $line + 2 - $pos;
    }
    if ($type eq '*') {
        return $next - $pos if $line < 0;
        for (1 .. $line) {
            my $len = reply($buf, $next) // return;
            $next += $len;
        }
        return $next - $pos;
    }
    return $next - $pos;
}

# one command as hiredis sends it
sub encode {
    return join '', '*' . @_ . "\r\n",
                    map { '$' . length($_) . "\r\n$_\r\n" } @_;
}

# what goes to Redis for a command nginx sent
sub upstream {
    my ($args, $opt) = @_;
    if ($opt->{refuse_set_get} && uc($args->[0]) eq 'SET') {
        my %o = map { uc($_) => 1 } @$args[3 .. $#$args];
        return encode('SET', $args->[1], '', 'NX', 'XX')
            if $o{NX} && $o{GET};
    }
    if ($opt->{refuse_set_get} && uc($args->[0]) eq 'PEXPIRE' && @$args > 3) {
        return encode('PEXPIRE', $args->[1]);
    }
    return encode(@$args);
}

sub serve {
    my ($srv, $redis, $control, $opt) = @_;

    my $sel = IO::Select->new($srv);
    my %c;    # by fileno of either side

    while (1) {
        my @ready = $sel->can_read(0.05);

        for my $fh (@ready) {
            if ($fh == $srv) {
                my $cl = $srv->accept or next;
                my $up = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                               PeerPort => $redis,
                                               Proto => 'tcp');
                unless ($up) {
                    close $cl;
                    next;
                }
                my $conn = { cl => $cl, up => $up, cin => '', sin => '',
                             out => '', cmds => [], wait => 0,
                             state => 'pass', before => 0 };
                $c{fileno $cl} = $conn;
                $c{fileno $up} = $conn;
                $sel->add($cl, $up);
                next;
            }

            my $conn = $c{fileno $fh} or next;
            my $n = sysread($fh, my $data, 65536);

            if (!$n) {
                $sel->remove($conn->{cl}, $conn->{up});
                delete $c{fileno $conn->{cl}};
                delete $c{fileno $conn->{up}};
                close $conn->{cl};
                close $conn->{up};
                next;
            }

            if ($fh == $conn->{cl}) {
                $conn->{cin} .= $data;
                my $up = '';
                while (my ($args, $len) = command($conn->{cin})) {
                    substr($conn->{cin}, 0, $len) = '';
                    $up .= upstream($args, $opt);
                    client_command($conn, $args, $control);
                }
                syswrite($conn->{up}, $up) if length $up;
            } else {
                $conn->{sin} .= $data;
            }

            replies($conn);
        }
    }
}

# a command nginx sent on $conn: the hold starts, moves on or ends
sub client_command {
    my ($conn, $args, $control) = @_;
    my $text = join ' ', @$args;
    my $wait = uc($args->[0]) eq 'WAIT';

    push @{ $conn->{cmds} }, $text;

    if ($conn->{state} eq 'pass' && $conn->{wait} && -e $control) {
        open my $fh, '<', $control or return;
        my ($a, $b) = split ' ', (<$fh> // '');
        if (defined $b && index($text, $a) >= 0) {
            $conn->{state} = 'hold';
            $conn->{b} = $b;
        }

    } elsif ($conn->{state} eq 'hold' && index($text, $conn->{b}) >= 0) {

        # the replies to the commands before this one may go
        $conn->{state} = 'split';
        $conn->{before} = @{ $conn->{cmds} } - 1;

    } elsif ($conn->{state} eq 'split' && $wait) {
        $conn->{state} = 'done';
        unlink $control;
    }

    $conn->{wait} = 1 if $wait;
}

# the whole replies read from Redis go to nginx, unless held
sub replies {
    my ($conn) = @_;
    while (length $conn->{sin}) {
        my $len = reply($conn->{sin}, 0) // last;
        last if $conn->{state} eq 'hold';
        last if $conn->{state} eq 'split' && $conn->{before} == 0;
        $conn->{before}-- if $conn->{state} eq 'split';
        syswrite($conn->{cl}, substr($conn->{sin}, 0, $len));
        substr($conn->{sin}, 0, $len) = '';
        shift @{ $conn->{cmds} };
    }
}

1;
