package IdemBg;

# Calls sent in the background with curl, for blocks that need a request
# still running while they do something else (a duplicate sent, Redis
# paused, the owner released).  Each answer, headers and body, goes to a
# file of the test file's scratch directory (IdemPaths::scratch(), never
# the server root), read back by done().
#
#   use IdemBg qw(bg done running);
#   bg('owner', 'pay-1', '/pay', '--data', 'x=1');
#   ...
#   like(done('owner'), qr/^HTTP\/1.1 200/);
#
# bg()'s arguments after the call id are curl's: one that starts with "/"
# is a path of the block's server; without a --max-time of their own the
# client gives up after 30 s, so that a test that fails does not hang.

use strict;
use warnings;

use Exporter 'import';
use POSIX ();
use IdemPaths ();

our @EXPORT_OK = qw(bg done running stop_all);

my %bg;

sub bg {
    my ($name, $id, @args) = @_;
    my $out = IdemPaths::scratch() . "/bg-$name";
    my $base = "http://127.0.0.1:$ENV{TEST_NGINX_SERVER_PORT}";

    @args = map { m{^/} ? "$base$_" : $_ } @args;
    unshift @args, '--max-time', '30' unless grep { $_ eq '--max-time' } @args;

    unlink $out;
    my $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        { exec('curl', '-s', '-i', '--noproxy', '*', '-o', $out,
               '-H', "X-Call-Id: $id", @args) };
        POSIX::_exit(1);
    }
    $bg{$name} = [$pid, $out];
    return $pid;
}

# waits for a background call to end; its answer ('' when it had none)
sub done {
    my ($name) = @_;
    my ($pid, $out) = @{ delete $bg{$name} or die "no call '$name' in bg" };
    waitpid($pid, 0);
    local (@ARGV, $/) = ($out);
    return -e $out ? <> : '';
}

# whether a background call is still running
sub running {
    my ($name) = @_;
    my $call = $bg{$name};
    return 0 if $call->[2];
    return 1 if waitpid($call->[0], POSIX::WNOHANG()) == 0;
    $call->[2] = 1;    # reaped: its pid may be anyone's by now
    return 0;
}

# ends the calls still running (a file's END, after a block that failed):
# a call not reaped yet, even one that ended, still holds its pid
sub stop_all {
    kill 'TERM', map { $_->[0] } grep { !$_->[2] } values %bg;
}

1;
