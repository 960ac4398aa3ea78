package Test::Nginx::Socket;

# The project's implementation of the part of OpenResty's Test::Nginx::Socket
# that its tests use.  t/compat/Test/Nginx/Socket.pm loads it when the real
# module is not installed (or IDEM_TEST_COMPAT=1).
#
# Like the real one it is a Test::Base subclass: Test::Base parses the
# blocks, applies the filters (eval, chomp ...), handles ONLY/SKIP/LAST and
# the plan, and exports Test::More's is/like/... .  IdemTestNginx::Runner
# does the work.  Spiffy's source filter (-Base) inserts "my $self = shift;"
# into subs without a prototype, hence a prototype on every sub here.

use Test::Base -Base;

use Test::LongString ();

use IdemTestNginx::Config qw(
    $ServerPort $ServRoot $NoShuffle $LogLevel $Timeout $Workers
    $WorkerConnections $MasterProcess $NoRootLocation $RepeatEach
    $NoLongString $CheckAccumErrLog @EnvToNginx
);
use IdemTestNginx::Runner;

our $VERSION = '0.01';

# The real module's names, for what is implemented.
our @EXPORT = qw(
    run_tests repeat_each no_shuffle no_long_string log_level
    workers master_on master_off master_process_enabled worker_connections
    env_to_nginx no_root_location timeout server_port server_root html_dir
    add_block_preprocessor add_cleanup_handler bail_out is_str
    check_accum_error_log
);

sub run_tests () {
    IdemTestNginx::Runner::run_tests();
}

sub repeat_each (@) {
    $RepeatEach = shift if @_;
    return $RepeatEach;
}

sub no_shuffle () {
    $NoShuffle = 1;
}

sub no_long_string () {
    $NoLongString = 1;
}

sub log_level (@) {
    $LogLevel = shift if @_;
    return $LogLevel;
}

sub workers (@) {
    $Workers = shift if @_;
    return $Workers;
}

sub master_on () {
    $MasterProcess = 'on';
}

sub master_off () {
    $MasterProcess = 'off';
}

sub master_process_enabled (@) {
    $MasterProcess = shift() ? 'on' : 'off' if @_;
    return $MasterProcess;
}

sub worker_connections (@) {
    $WorkerConnections = shift if @_;
    return $WorkerConnections;
}

# Environment variables nginx keeps for its workers ("env" directives).
sub env_to_nginx (@) {
    for my $v (@_) {
        croak "env_to_nginx: bad argument value: $v"
            if $v !~ /^[A-Za-z_]/ || $v =~ /\n/;
        push @EnvToNginx, $v;
    }
}

sub no_root_location () {
    $NoRootLocation = 1;
}

# The client's idle timeout, in seconds, for blocks without --- timeout.
sub timeout (@) {
    $Timeout = shift if @_;
    return $Timeout;
}

sub server_port (@) {
    if (@_) {
        $ServerPort = shift;
        $ENV{TEST_NGINX_SERVER_PORT} = $ServerPort;
    }
    return $ServerPort;
}

sub server_root () {
    return $ServRoot;
}

sub html_dir () {
    return IdemTestNginx::Config::html_dir();
}

# Code run on each block before it runs, e.g. to give sections defaults.
sub add_block_preprocessor (&) {
    unshift @IdemTestNginx::Runner::BlockPreprocessors, shift;
}

sub add_cleanup_handler ($) {
    unshift @IdemTestNginx::Runner::CleanupHandlers, shift;
}

sub bail_out (@) {
    IdemTestNginx::Runner::bail_out(join '', @_);
}

sub check_accum_error_log () {
    $CheckAccumErrLog = 1;
}

sub is_str (@) {
    my ($got, $expected, $desc) = @_;

    return Test::More::like($got, $expected, $desc)
        if ref $expected eq 'Regexp';

    return Test::More::is($got, $expected, $desc) if $NoLongString;

    return Test::LongString::is_string($got, $expected, $desc);
}
