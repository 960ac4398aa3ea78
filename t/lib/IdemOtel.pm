package IdemOtel;

# The test collector of t/210-otel.t (t/lib/otlp_collector.py, an OTLP/HTTP
# receiver that parses every request with the official protos) and what a
# test asks of the spans it received.
#
#   IdemOtel::start();                     # on TEST_NGINX_OTEL_PORT
#   my @s = IdemOtel::wait_spans($trace, 3);   # a trace's spans, once 3 came
#   IdemOtel::errors();                    # what did not parse ('' if all did)

use strict;
use warnings;

use JSON::PP ();
use POSIX ();
use IdemPaths ();
use IdemWait ();

our $Python = '/usr/bin/python3';   # Debian's, with python3-protobuf

my ($pid, $dir);

sub port { $ENV{TEST_NGINX_OTEL_PORT} }

sub dir { $dir }

# whether the collector can run here: the reason it cannot, or undef
sub missing {
    return 'protoc is not installed (make deps: protobuf-compiler)'
        if system('protoc --version >/dev/null 2>&1') != 0;
    return 'python3-protobuf is not installed (make deps)'
        if system("$Python -c 'import google.protobuf' 2>/dev/null") != 0;
    return undef;
}

# the collector a run that was stopped left (its pid file; the process
# only if it is that collector still), stopped
sub stale {
    my $root = $ENV{TEST_NGINX_ROOT} // '.';
    my $file = "$root/t/tmp/otlp-collector-" . port() . '.pid';
    if (open my $fh, '<', $file) {
        my $old = <$fh> // '';
        chomp $old;
        my $cmd = '';
        if ($old =~ /^\d+$/ && open my $c, '<', "/proc/$old/cmdline") {
            local $/;
            $cmd = <$c> // '';
        }
        kill 'KILL', $old if $cmd =~ /otlp_collector\.py/;
    }
    return $file;
}

sub start {
    my $pidfile = stale();
    $dir = IdemPaths::scratch() . '/otel';
    system('rm', '-rf', $dir);
    mkdir $dir or die "$dir: $!";
    my $root = $ENV{TEST_NGINX_ROOT} // '.';
    $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        { exec($Python, "$root/t/lib/otlp_collector.py", port(), $dir) };
        POSIX::_exit(1);
    }
    if (open my $fh, '>', $pidfile) {
        print $fh "$pid\n";
        close $fh;
    }
    IdemWait::wait_for('the collector ready', sub { -e "$dir/ready" })
        or die "the test collector did not start\n";
    return $pid;
}

sub stop {
    return unless $pid;
    kill 'CONT', $pid;
    kill 'TERM', $pid;
    waitpid $pid, 0;
    undef $pid;
}

sub pause  { kill 'STOP', $pid }
sub resume { kill 'CONT', $pid }

# a slow collector: seconds before each answer (0: none)
sub delay {
    my ($secs) = @_;
    if ($secs) {
        open my $fh, '>', "$dir/delay" or die "$dir/delay: $!";
        print $fh "$secs\n";
        close $fh;
    } else {
        unlink "$dir/delay";
    }
}

sub slurp {
    my ($f) = @_;
    open my $fh, '<', $f or return '';
    local $/;
    return <$fh>;
}

sub errors { slurp("$dir/errors") }

# every span received, or those of one trace
sub spans {
    my ($trace) = @_;
    my @s = map { JSON::PP::decode_json($_) }
            grep { length } split /\n/, slurp("$dir/spans");
    return defined $trace ? grep { $_->{traceId} eq $trace } @s : @s;
}

# a trace's spans once at least $n of them came (an empty list if not)
sub wait_spans {
    my ($trace, $n) = @_;
    IdemWait::wait_for("$n spans of trace $trace",
                       sub { spans($trace) >= $n })
        or return ();
    return spans($trace);
}

# a random W3C trace id or span id (hex digits)
sub hexid {
    my ($n) = @_;
    return join '', map { sprintf '%x', int rand 16 } 1 .. $n;
}

1;
