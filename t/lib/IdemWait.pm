package IdemWait;

# Waiting for an event instead of sleeping a fixed time: a test that needs
# an owner's request to have reached the backend, or its duplicates to be
# parked, polls for exactly that, up to a deadline far beyond what a slow
# or loaded machine needs.  A fixed sleep is a race a slower machine loses.
#
#   ok(IdemWait::wait_for('the owner at the backend',
#                         sub { IdemWait::backend_runs('w-1') >= 1 }));

use strict;
use warnings;

use Exporter 'import';
use POSIX ();
use IO::Socket::INET ();
use Time::HiRes qw(sleep time);
use IdemPaths ();

our @EXPORT_OK = qw(wait_for backend_runs release log_count log_ok log_after
                    metric get);

# how long wait_for() polls unless told: only a test that is failing
# waits this long
our $Secs = 30;

# the first true value $check returns, polled every 20 ms for at most
# $secs; undef (and a diag naming $what) when the deadline passed first
sub wait_for {
    my ($what, $check, $secs) = @_;
    $secs //= $Secs;
    my $until = time + $secs;
    while (1) {
        my $v = $check->();
        return $v if $v;
        last if time >= $until;
        sleep 0.02;
    }
    require Test::More;
    Test::More::diag("gave up after $secs s waiting for $what");
    return undef;
}

# the body of a GET to 127.0.0.1:$port ('' when there is no answer)
sub get {
    my ($port, $path) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 5)
        or return '';
    print $s "GET $path HTTP/1.0\r\nHost: localhost\r\n\r\n";
    local $/;
    my $res = <$s> // '';
    close $s;
    return $res =~ /\r\n\r\n(.*)\z/s ? $1 : '';
}

# a request written byte for byte to the Test::Nginx server (bytes over
# 0x7f in its line too): the answer's status and body
sub raw {
    my ($bytes) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $ENV{TEST_NGINX_SERVER_PORT},
                                  Timeout => 10)
        or die "connect: $!";
    binmode $s;
    print $s $bytes;
    local $/;
    my $res = <$s> // '';
    close $s;
    return $res =~ m{^HTTP/1\.\d (\d+).*?\r\n\r\n(.*)\z}s ? ($1, $2) : (0, '');
}

# how many requests of call id $id util/backend.pl has seen (counted when
# each arrived, before it sleeps or is held)
sub backend_runs {
    my ($id) = @_;
    my $log = get($ENV{TEST_NGINX_BACKEND_PORT}, "/log/$id");
    return scalar grep { length } split /\n/, $log;
}

# lets the backend's held requests of call id $id (/hold/K) answer
sub release {
    my ($id) = @_;
    return get($ENV{TEST_NGINX_BACKEND_PORT}, "/release/$id") eq "released\n";
}

# how many lines of an error log ($file, by default the Test::Nginx
# server's) match $re
sub log_count {
    my ($re, $file) = @_;
    $file //= IdemPaths::error_log();
    open my $fh, '<', $file or return 0;
    my $n = 0;
    while (<$fh>) {
        $n++ if $_ =~ $re;
    }
    return $n;
}

# waits until a line of the Test::Nginx server's error log matches $re: a
# passing test named $what if one came, a failing one if not
sub log_ok {
    my ($what, $re) = @_;
    require Test::More;
    return Test::More::ok(wait_for($what, sub { log_count($re) }), $what);
}

# runs $change (a sub), then waits for one more line matching $re in the
# Test::Nginx server's error log than there was before: true if it came
# (a failing test, named $what, if not)
sub log_after {
    my ($what, $re, $change) = @_;
    my $n = log_count($re);
    $change->();
    require Test::More;
    return Test::More::ok(wait_for($what, sub { log_count($re) > $n }),
                          $what);
}

# a metric's value (name with its labels, as written) from an idem_metrics
# location of the Test::Nginx server; undef when it is not there
sub metric {
    my ($name, $path) = @_;
    my $text = get($ENV{TEST_NGINX_SERVER_PORT}, $path // '/metrics');
    return $text =~ /^\Q$name\E (\d+)$/m ? $1 : undef;
}


# how many duplicates of call id $id have been parked (each one's first
# wait), and how many waiters of it are watched (woken by its final
# write), by an error log ($file, as log_count's)
sub parked {
    my ($id, $file) = @_;
    return log_count(qr/idem dedupe: "\Q$id\E" in flight, waits /, $file);
}

sub watched {
    my ($id, $file) = @_;
    return log_count(qr/idem dedupe: "\Q$id\E" watched/, $file);
}

# waits until $n duplicates of call id $id are parked: a test
sub parked_ok {
    my ($id, $n) = @_;
    require Test::More;
    return Test::More::ok(wait_for("$n parked duplicates of $id",
                                   sub { parked($id) >= $n }),
                          "$n duplicate(s) of $id parked");
}

# in the background: lets the backend's held requests of call id $id
# answer once $count->($id) (parked, watched) reaches $n, or at
# wait_for's deadline, so that they end in any case; the helper's pid
sub release_when {
    my ($id, $count, $n) = @_;
    my $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        wait_for("$n of $id", sub { $count->($id) >= $n });
        release($id);
        POSIX::_exit(0);
    }
    return $pid;
}

# waits until the owner of call id $id is at the backend (its claim made):
# a test
sub owner_in {
    my ($id) = @_;
    require Test::More;
    return Test::More::ok(wait_for("the owner of $id at the backend",
                                   sub { backend_runs($id) >= 1 }),
                          "the owner of $id is at the backend");
}

1;
