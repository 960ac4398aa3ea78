package RawHttpPeer;

# An HTTP/1.1 server that answers every request with the bytes a test
# gives it, verbatim, for the blocks that check how nginx's side reads an
# answer it did not expect (t/210: the span exporter's reading of its
# collector's answer).  It reads each request whole (Content-Length), then
# writes the answer; the connection stays open unless nginx closes it.
#
#   my $pid = RawHttpPeer::start($port, $dir);
#   RawHttpPeer::answer($dir, "HTTP/1.1 200 OK\r\n...", "...");
#   RawHttpPeer::requests($dir);      # requests read, in all
#   RawHttpPeer::connections($dir);   # connections accepted, in all
#   RawHttpPeer::request_connections($dir);   # each request's, in order
#   RawHttpPeer::stop($pid);
#
# An answer given in several parts is written part by part, each once
# the one before it was sent and 50 ms have passed: nginx then reads the
# parts apart (a later read than the first is what a parser must wait
# for; a test does not count on it, it only makes the split likely).

use strict;
use warnings;
use IO::Socket::INET;
use IO::Select;
use POSIX ();
use Time::HiRes qw(sleep);

sub start {
    my ($port, $dir) = @_;

    system('rm', '-rf', $dir);
    mkdir $dir or die "$dir: $!";

    my $srv = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                    LocalPort => $port, Listen => 64,
                                    ReuseAddr => 1, Proto => 'tcp')
        or die "RawHttpPeer: listen on $port: $!\n";

    my $pid = fork() // die "fork: $!";
    if ($pid) {
        close $srv;
        return $pid;
    }

    eval { serve($srv, $dir) };
    POSIX::_exit(0);
}

sub stop {
    my ($pid) = @_;
    return unless $pid;
    kill 'KILL', $pid;
    waitpid($pid, 0);
}

# the answer to every request from now on, in parts
sub answer {
    my ($dir, @parts) = @_;
    open my $fh, '>', "$dir/answer.tmp" or die "$dir: $!";
    binmode $fh;
    print $fh join("\0PART\0", @parts);
    close $fh;
    rename "$dir/answer.tmp", "$dir/answer" or die "$dir: $!";
}

sub count {
    my ($file) = @_;
    open my $fh, '<', $file or return 0;
    my $n = () = <$fh>;
    return $n;
}

sub requests    { count("$_[0]/requests") }
sub connections { count("$_[0]/connections") }

# each request's connection (1, 2, ... as accepted), in order
sub request_connections {
    my ($dir) = @_;
    open my $fh, '<', "$dir/requests" or return ();
    return map { /(\d+)/ ? $1 : () } <$fh>;
}

sub note {
    my ($file, $line) = @_;
    open my $fh, '>>', $file or return;
    print $fh "$line\n";
    close $fh;
}

sub parts {
    my ($dir) = @_;
    open my $fh, '<', "$dir/answer"
        or return ("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
    binmode $fh;
    local $/;
    return split /\0PART\0/, <$fh>;
}

sub serve {
    my ($srv, $dir) = @_;

    my $sel = IO::Select->new($srv);
    my (%in, %id);
    my $n = 0;

    while (1) {
        for my $fh ($sel->can_read(1)) {
            if ($fh == $srv) {
                my $c = $srv->accept or next;
                $sel->add($c);
                $in{fileno $c} = '';
                $id{fileno $c} = ++$n;
                note("$dir/connections", $n);
                next;
            }

            my $got = sysread($fh, my $data, 65536);
            if (!$got) {
                $sel->remove($fh);
                delete $in{fileno $fh};
                close $fh;
                next;
            }

            my $buf = \$in{fileno $fh};
            $$buf .= $data;

            # each whole request: its headers and Content-Length bytes
            while ($$buf =~ /\A(.*?\r\n\r\n)/s) {
                my $head = length $1;
                my ($len) = $1 =~ /^content-length:\s*(\d+)/mi;
                last if length($$buf) < $head + ($len // 0);
                substr($$buf, 0, $head + ($len // 0)) = '';
                note("$dir/requests", $id{fileno $fh});
                my @parts = parts($dir);
                for my $i (0 .. $#parts) {
                    # a pause, not a wait: nothing tells when nginx has
                    # read a part; it only makes a read between them likely
                    sleep 0.05 if $i;
                    syswrite($fh, $parts[$i]);
                }
            }
        }
    }
}

1;
