package IdemNginx;

# One nginx of a plain Test::More file (a master process, signals,
# reloads, several instances: what the Test::Nginx format does not do):
# its server root, its nginx.conf, start, wait for the port, reload, stop,
# and its error log.
#
#   my $ng = IdemNginx->new(name => 'reload', port => $port, workers => 2);
#   $ng->write_conf($http);         # what goes inside http { }
#   $ng->start or BAIL_OUT('nginx does not start: ' . $ng->out);
#   ... $ng->reload; ... $ng->stop or fail(...);
#   unlike($ng->log_text, qr/\[alert\]/, ...);
#
# The server root is t/servroot-NAME-PORT, made anew by new().  nginx runs
# as Test::Nginx runs it: the modules of TEST_NGINX_LOAD_MODULES loaded,
# TEST_NGINX_BINARY (or nginx in PATH), "user root" when run as root, the
# temp paths and logs in the server root.  An instance still running when
# the file ends (a die, a BAIL_OUT) is stopped then, by the process that
# made it only (not by a client the file forked).

use strict;
use warnings;
use IO::Socket::INET;
use File::Path qw(make_path remove_tree);
use Time::HiRes qw(sleep);
use Cwd qw(abs_path);

my $root = abs_path(__FILE__ =~ m{^(.*)/t/lib/} ? $1 : '.');
my @running;

sub root { $root }

sub binary { $ENV{TEST_NGINX_BINARY} || 'nginx' }

# the port the Test::Nginx files use; a plain file takes its own from it
sub base_port {
    return $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT} || 1984;
}

# new(name => N, port => P, %conf): %conf are the defaults of write_conf
sub new {
    my ($class, %o) = @_;
    defined $o{$_} or die "IdemNginx->new: no $_\n" for qw(name port);

    my $self = bless {
        port => $o{port},
        sr => "$root/t/servroot-$o{name}-$o{port}",
        owner => $$,
        conf => {
            workers => 1,
            log_level => 'info',
            worker_connections => 64,
            main => '',
        },
    }, $class;

    for (keys %{ $self->{conf} }) {
        $self->{conf}{$_} = $o{$_} if defined $o{$_};
    }

    remove_tree($self->{sr});
    make_path("$self->{sr}/conf", "$self->{sr}/logs");

    return $self;
}

sub port { $_[0]{port} }
sub servroot { $_[0]{sr} }
sub conf_file { "$_[0]{sr}/conf/nginx.conf" }
sub error_log { "$_[0]{sr}/logs/error.log" }
sub out { $_[0]{out} // '' }

# write_conf($http, %conf): nginx.conf with $http inside http { } (after
# access_log and the temp paths); %conf overrides new()'s for this one:
#   workers (1), log_level (info), worker_connections (64),
#   main: directives of the main context ('')
sub write_conf {
    my ($self, $http, %o) = @_;
    my %c = (%{ $self->{conf} }, %o);
    my $sr = $self->{sr};

    my $load = join '', map { "load_module $_;\n" }
                        split ' ', ($ENV{TEST_NGINX_LOAD_MODULES} || '');
    my $user = $> == 0 ? "user root;\n" : '';
    my $main = $c{main} eq '' ? '' : "$c{main}\n";

    open my $fh, '>', $self->conf_file or die $self->conf_file . ": $!\n";
    print $fh <<"CONF";
${load}${user}worker_processes $c{workers};
master_process on;
daemon on;
error_log $sr/logs/error.log $c{log_level};
pid $sr/logs/nginx.pid;
${main}events { worker_connections $c{worker_connections}; }
http {
    access_log off;
    client_body_temp_path $sr/client_body_temp;
    proxy_temp_path $sr/proxy_temp;
    fastcgi_temp_path $sr/fastcgi_temp;
    uwsgi_temp_path $sr/uwsgi_temp;
    scgi_temp_path $sr/scgi_temp;
$http
}
CONF
    close $fh or die $self->conf_file . ": $!\n";
}

# Starts nginx (it daemonizes) and waits until its port accepts.  True if
# nginx said it started; what it printed is in out().
sub start {
    my ($self) = @_;
    my $sr = $self->{sr};
    my $cmd = binary() . " -p $sr/ -c " . $self->conf_file
              . ' -e ' . $self->error_log;

    $self->{out} = `$cmd 2>&1`;
    return 0 if $?;

    push @running, $self;
    $self->wait_port;

    # the daemon writes its pid file after the parent has returned
    for (1 .. 100) {
        last if defined $self->master;
        sleep 0.1;
    }
    return 1;
}

# until $port (the instance's) accepts a connection, at most $secs (10)
sub wait_port {
    my ($self, $port, $secs) = @_;
    $port //= $self->{port};
    for (1 .. ($secs // 10) * 10) {
        return 1 if IO::Socket::INET->new("127.0.0.1:$port");
        sleep 0.1;
    }
    return 0;
}

# the master's pid, from the pid file (undef while there is none)
sub master {
    my ($self) = @_;
    open my $f, '<', "$self->{sr}/logs/nginx.pid" or return undef;
    my $pid = <$f> // '';
    chomp $pid;
    return $pid =~ /^\d+$/ && $self->ours($pid) ? $pid : undef;
}

# whether $pid is a master of this server root still: a pid file left by
# a master that was killed may name any process by now (pids are reused,
# 32768 of them on a small machine); the master's title keeps its
# arguments, the server root among them (a zombie's are gone)
sub ours {
    my ($self, $pid) = @_;
    open my $f, '<', "/proc/$pid/cmdline" or return 0;
    my $cmd = do { local $/; <$f> } // '';
    return index($cmd, "$self->{sr}/") >= 0;
}

# the pids of the master's children: its workers (and cache processes)
sub children {
    my ($self, $master) = @_;
    $master //= $self->master or return ();
    open my $f, '<', "/proc/$master/task/$master/children" or return ();
    my $list = <$f> // '';
    return $list =~ /(\d+)/g;
}

sub signal {
    my ($self, $sig) = @_;
    my $pid = $self->master or return 0;
    return kill($sig, $pid) ? 1 : 0;
}

# HUP: true if the master got it (the reload itself takes its time)
sub reload { $_[0]->signal('HUP') }

# QUIT (a graceful shutdown), without waiting for it
sub quit { $_[0]->signal('QUIT') }

# true once $pid (the master's) is gone, waiting at most $secs (10)
sub gone {
    my ($self, $secs, $pid) = @_;
    $pid //= $self->master or return 1;
    for (1 .. ($secs // 10) * 10) {
        return 1 unless $self->ours($pid);
        sleep 0.1;
    }
    return 0;
}

# QUIT, and true if the master exits within $secs (10)
sub stop {
    my ($self, $secs) = @_;
    my $pid = $self->master or return 1;
    kill 'QUIT', $pid;
    my $gone = $self->gone($secs, $pid);
    @running = grep { $_ != $self } @running if $gone;
    return $gone;
}

# stop(), then TERM, then KILL while the master is still there
sub stop_hard {
    my ($self) = @_;
    my $pid = $self->master or return;
    return if $self->stop;
    for my $sig ('TERM', 'KILL') {
        kill $sig, $pid;
        return if $self->gone(10, $pid);
    }
}

sub log_text { slurp($_[0]->error_log) }

# a file's text ('' if there is none)
sub slurp {
    my ($file) = @_;
    open my $fh, '<', $file or return '';
    local $/;
    return scalar(<$fh>) // '';
}

# the log's length: log_text() from there on is what came after
sub log_pos { length $_[0]->log_text }

# until the log after $from matches $re, at most $secs (10); true if so
sub wait_log {
    my ($self, $re, $from, $secs) = @_;
    for (1 .. ($secs // 10) * 10) {
        return 1 if substr($self->log_text, $from // 0) =~ $re;
        sleep 0.1;
    }
    return 0;
}

# the lines that say something went wrong: alert, crit, emerg (and error
# with $with_error), a worker's crash; minus those matching $allow
sub bad_lines {
    my ($self, %o) = @_;
    return bad_lines_in($self->log_text, %o);
}

# the same, of an error log's text
sub bad_lines_in {
    my ($log, %o) = @_;
    my $level = $o{with_error} ? 'alert|crit|emerg|error' : 'alert|crit|emerg';
    return grep { !($o{allow} && /$o{allow}/) }
           grep { /\[(?:$level)\]|exited on signal/ }
           split /\n/, $log;
}

END {
    local $?;
    for my $ng (@running) {
        next unless $ng->{owner} == $$;
        my $pid = $ng->master or next;
        kill 'QUIT', $pid;
        kill 'KILL', $pid unless $ng->gone(5, $pid);
    }
}

1;
