package IdemTestNginx::Config;

# Settings of the compat Test::Nginx harness.  Like the real Test::Nginx,
# they are read from the environment once, when the harness is loaded; the
# functions a test file calls before run_tests() (log_level(), workers() ...)
# change them through the exported variables.

use strict;
use warnings;

use Exporter 'import';
use File::Spec ();
use IO::Socket::INET ();

our @EXPORT = qw(
    $NginxBinary $ServerAddr $ServerName $ServerPort $ServRoot
    $LoadModules $NoShuffle $LogLevel $Timeout $UseValgrind $NoClean
    $Randomize $EventType $Workers $WorkerConnections $MasterProcess
    $NoRootLocation
    $RepeatEach $NoLongString $CheckAccumErrLog @EnvToNginx
    log_dir err_log_file html_dir conf_dir conf_file pid_file
    default_timeout parse_time expand_env free_port
);

our $NginxBinary = $ENV{TEST_NGINX_BINARY} || 'nginx';
our $ServerAddr  = '127.0.0.1';
our $ServerName  = 'localhost';
our $ServerPort  = $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT}
                   || 1984;
our $LoadModules = $ENV{TEST_NGINX_LOAD_MODULES} // '';
our $NoShuffle   = $ENV{TEST_NGINX_NO_SHUFFLE} || 0;
our $LogLevel    = $ENV{TEST_NGINX_LOG_LEVEL} || 'debug';
our $Timeout     = $ENV{TEST_NGINX_TIMEOUT} || 3;
our $UseValgrind = $ENV{TEST_NGINX_USE_VALGRIND};
our $NoClean     = $ENV{TEST_NGINX_NO_CLEAN};
our $Randomize   = $ENV{TEST_NGINX_RANDOMIZE};
our $EventType   = $ENV{TEST_NGINX_EVENT_TYPE};    # "use" in events {}

our $Workers           = 1;
our $WorkerConnections = 64;
our $MasterProcess     = $ENV{TEST_NGINX_MASTER_PROCESS} || 'off';
our $NoRootLocation    = 0;
our $RepeatEach        = 1;
our $NoLongString      = 0;
our $CheckAccumErrLog  = 0;
our @EnvToNginx;

# Parallel runs (prove -jN) need their own port and server root each.
if ($Randomize) {
    $ServerPort = free_port({}, 1)
        or die "TEST_NGINX_RANDOMIZE: no free port found\n";
}

our $ServRoot = File::Spec->rel2abs(
    $Randomize                 ? "t/servroot_$ServerPort"
    : $ENV{TEST_NGINX_SERVROOT} ? $ENV{TEST_NGINX_SERVROOT}
    :                            't/servroot');

# Configs refer to these as $TEST_NGINX_SERVER_PORT / $TEST_NGINX_SERVER_ROOT
# (e.g. to proxy back to the server under test).
$ENV{TEST_NGINX_SERVER_PORT} = $ServerPort;
$ENV{TEST_NGINX_SERVER_ROOT} = $ServRoot;

sub log_dir      { "$ServRoot/logs" }
sub err_log_file { "$ServRoot/logs/error.log" }
sub html_dir     { "$ServRoot/html" }
sub conf_dir     { "$ServRoot/conf" }
sub conf_file    { "$ServRoot/conf/nginx.conf" }
sub pid_file     { "$ServRoot/logs/nginx.pid" }

# Valgrind slows nginx down several times over.
sub default_timeout {
    return $UseValgrind ? 3 * $Timeout : $Timeout;
}

# "1.5", "1.5s" or "500ms" -> seconds.
sub parse_time {
    my ($t) = @_;

    return undef unless defined $t;

    $t =~ s/^\s+|\s+$//g;

    return $1 / 1000 if $t =~ /^([\d.]+)ms$/;
    return $1        if $t =~ /^([\d.]+)s?$/;

    die "bad time value \"$t\"\n";
}

# Replaces $TEST_NGINX_FOO by $ENV{TEST_NGINX_FOO}; $TEST_NGINX_RAND_PORT_<n>
# by a free port, the same one everywhere in the block ($rand_ports holds the
# block's choices).  Dies on an undefined variable.
sub expand_env {
    my ($text, $rand_ports) = @_;

    return $text unless defined $text && !ref $text;

    $text =~ s{\$(TEST_NGINX_[_A-Z0-9]+)}{
        my $var = $1;
        my $val;

        if ($var =~ /^TEST_NGINX_RAND_PORT_\d+$/) {
            if (!defined $rand_ports->{$var}) {
                my $port = free_port($rand_ports)
                    or die "no free port found for \$$var\n";
                $rand_ports->{$var} = $port;
            }
            $val = $rand_ports->{$var};

        } else {
            $val = $ENV{$var};
            die "No environment $var defined.\n" unless defined $val;
        }

        $val;
    }ge;

    return $text;
}

# A port nobody listens on, other than the server port and the ports in
# $taken (a hash whose values are ports).  $TEST_NGINX_RAND_PORT_<n> comes
# from the server port's own range, server port + 976 to + 999: a shard of
# make test owns its base to base + 999 (util/test-shards.sh), and the
# files derive no port there from the three it is given, nor does another
# stage's fixed port fall in it.  $wide (TEST_NGINX_RANDOMIZE's server
# port): anywhere above 1985.
sub free_port {
    my ($taken, $wide) = @_;

    my %used = map { $_ => 1 } values %$taken;
    $used{$ServerPort} = 1 if defined $ServerPort;

    my ($lo, $n) = (1985, 65535 - 1985);
    ($lo, $n) = ($ServerPort + 976, 24)
        if !$wide && defined $ServerPort && $ServerPort + 999 <= 65535;

    for (1 .. ($n < 1000 ? 4 * $n : 1000)) {
        my $port = $lo + int rand($n);

        next if $used{$port};

        my $sock = IO::Socket::INET->new(LocalAddr => $ServerAddr,
                                         LocalPort => $port,
                                         Proto     => 'tcp',
                                         Listen    => 1);
        if ($sock) {
            close $sock;
            return $port;
        }
    }

    return undef;
}

1;
