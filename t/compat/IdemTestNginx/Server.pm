package IdemTestNginx::Server;

# The nginx under test: server root, nginx.conf, start and stop, valgrind.
#
# Normally nginx runs as a daemon ("daemon on", the real Test::Nginx's
# default) and is found again through its pid file.  Under
# TEST_NGINX_USE_VALGRIND it runs in the foreground ("daemon off") as our
# child, so that valgrind sees the whole process and we get its exit status.

use strict;
use warnings;

use File::Basename qw(dirname);
use File::Path qw(make_path remove_tree);
use File::Spec ();
use POSIX qw(WNOHANG _exit);
use Time::HiRes qw(sleep time);
use Time::Local qw(timegm);

use IdemTestNginx::Config;

# Exit status valgrind uses when it found errors, distinct from nginx's own.
use constant VALGRIND_ERROR_EXIT => 99;

our $Pid;          # nginx (or valgrind running nginx) started by us
our $IsChild;      # $Pid is our child (valgrind mode)
our $LogStart = 0; # error.log size when the current nginx was started

my $TDir = File::Spec->rel2abs(dirname(dirname(dirname(__FILE__))));

# Makes the server root anew.  As the real Test::Nginx does, only the
# directories a run makes are removed (conf, html, logs, cache, *_cache,
# *_temp), so that a TEST_NGINX_SERVROOT pointing somewhere precious loses
# nothing else, and then the folder itself: anything else left in it (a
# test's own files, which belong in IdemPaths::scratch()) is an error here
# as it is there.
sub setup_servroot {
    if (-d $ServRoot && !$NoClean) {
        remove_tree(conf_dir(), html_dir(), log_dir(), "$ServRoot/cache",
                    glob("$ServRoot/*_cache"), glob("$ServRoot/*_temp"));
        rmdir $ServRoot
            or die "Can't remove $ServRoot (not empty?): $!\n";
    }

    make_path(log_dir(), html_dir(), conf_dir());

    write_file(html_dir() . '/index.html',
               '<html><head><title>It works!</title></head>'
               . '<body>It works!</body></html>');
}

# --- user_files: ">>> name [mtime]" lines followed by the content, or (eval)
# an array of [name, content, mtime].  mtime is YYYYMMDDhhmm[.ss] in GMT.
sub write_user_files {
    my ($spec, $rand_ports) = @_;

    return unless defined $spec;

    my $files = $spec;

    if (!ref $files) {
        $files = [];
        for my $line (split /^/, $spec) {
            if ($line =~ /^>>> (\S+)(?:\s+(.+))?/) {
                push @$files, [$1, '', $2];
            } elsif (@$files) {
                $files->[-1][1] .= $line;
            }
        }

    } elsif (ref $files ne 'ARRAY') {
        die "--- user_files must be text or an array\n";
    }

    for my $file (@$files) {
        my ($name, $body, $mtime) = @$file;

        # prove -r t would pick it up as a test file on the next run.
        die "--- user_files: \"$name\": a .t file in the server root would "
            . "be run by prove -r t\n" if $name =~ /\.t$/;

        my $path = $name =~ m{^/} ? $name : html_dir() . "/$name";

        make_path(dirname($path));
        write_file($path, expand_env($body // '', $rand_ports));

        if (defined $mtime) {
            $mtime =~ /^(\d{4})(\d\d)(\d\d)(\d\d)(\d\d)(?:\.(\d\d))?$/
                or die "--- user_files: bad time \"$mtime\" for $name\n";

            my $t = timegm($6 // 0, $5, $4, $3, $2 - 1, $1);
            utime $t, $t, $path or die "utime $path: $!\n";
        }
    }
}

# Writes nginx.conf in the layout of the real Test::Nginx.  %s holds the
# block's (already expanded) config, http_config, main_config and log_level;
# daemon is "off" only for nginx under valgrind.
sub write_config {
    my (%s) = @_;

    my $sr = $ServRoot;
    my $modules = join '', map { "load_module $_;\n" }
                           grep { length } split /\s+/, $LoadModules;
    my $env = join '', map { /\s/ ? "env '$_';\n" : "env $_;\n" } @EnvToNginx;
    my $root_location = $NoRootLocation ? '' : <<"_EOC_";
        location / {
            root $sr/html;
            index index.html index.htm;
        }
_EOC_
    my $user = $> == 0 ? "user root;\n" : '';
    my $events = $EventType ? "    use $EventType;\n" : '';

    write_file(conf_file(), <<"_EOC_");
worker_processes  $Workers;
daemon $s{daemon};
master_process $MasterProcess;
error_log $sr/logs/error.log $s{log_level};
pid       $sr/logs/nginx.pid;
$env
$modules
$s{main_config}

http {
    access_log $sr/logs/access.log;

    client_body_temp_path $sr/client_body_temp;
    proxy_temp_path       $sr/proxy_temp;
    fastcgi_temp_path     $sr/fastcgi_temp;
    uwsgi_temp_path       $sr/uwsgi_temp;
    scgi_temp_path        $sr/scgi_temp;

    default_type text/plain;

$s{http_config}

    server {
        listen          $ServerPort;
        server_name     $ServerName;

        client_max_body_size 30M;

$s{config}

$root_location    }
}

events {
    worker_connections  $WorkerConnections;
$events}

$user
_EOC_
}

# Starts nginx on the written config.  Returns undef on success, or why it
# failed.
sub start {
    return $UseValgrind ? start_valgrind(nginx_cmd())
                        : start_daemon(nginx_cmd());
}

# For --- must_die: runs nginx once, without valgrind (there is nothing to
# check), and returns its wait status.  If it wrongly starts, it is stopped.
sub start_must_die {
    $LogStart = -s err_log_file() || 0;

    my $status = run_launcher(nginx_cmd());

    if ($status == 0) {
        for (1 .. 20) {
            last if read_pid_file();
            sleep 0.05;
        }
        stop(5);
    }

    return $status;
}

sub nginx_cmd {
    return (split(' ', $NginxBinary),
            '-p', "$ServRoot/", '-c', conf_file(), '-e', err_log_file());
}

sub start_daemon {
    my (@cmd) = @_;

    my $deadline = time + 5;

    while (1) {
        $LogStart = -s err_log_file() || 0;

        my $status = run_launcher(@cmd);

        last if $status == 0;

        # The previous nginx may still hold the port for a moment.
        my $log = read_from(err_log_file(), $LogStart);
        if ($log =~ /Address already in use/ && time < $deadline) {
            sleep 0.2;
            next;
        }

        return "nginx exited with status " . ($status >> 8) . ":\n"
               . $log . read_from(log_dir() . '/nginx.stderr', 0);
    }

    # nginx listens before it daemonizes, and the daemon writes its pid file
    # just after the launcher has exited: a short wait, longer on a loaded
    # machine.
    for (1 .. 200) {
        $Pid = read_pid_file();
        last if $Pid && listening($ServerPort);
        sleep 0.05;
    }

    $IsChild = 0;

    my $why = !$Pid ? "nginx started but wrote no pid file " . pid_file()
            : !listening($ServerPort)
              ? "nginx started but does not listen on port $ServerPort"
            : undef;

    # never left behind, holding the port against the next blocks
    stop(5) if defined $why;

    return $why;
}

# Runs the nginx command in the foreground (it exits once daemonized) with
# its stdout/stderr in logs/nginx.stderr; returns its wait status.
sub run_launcher {
    my (@cmd) = @_;

    my $pid = spawn(@cmd);
    waitpid $pid, 0;

    return $?;
}

sub start_valgrind {
    my (@cmd) = @_;

    my @vg = ('valgrind', '-q', '--tool=memcheck', '--num-callers=100',
              '--leak-check=full',
              # "still reachable" and "possibly lost" blocks are normal
              # when nginx exits: only definite/indirect leaks count.
              '--show-leak-kinds=definite,indirect',
              '--errors-for-leak-kinds=definite,indirect',
              '--error-exitcode=' . VALGRIND_ERROR_EXIT,
              '--gen-suppressions=all',
              '--log-file=' . log_dir() . '/valgrind.log');

    for my $supp ("$TDir/valgrind.suppress", 'valgrind.suppress') {
        push @vg, "--suppressions=$supp" if -f $supp;
    }

    # Any other value of TEST_NGINX_USE_VALGRIND is extra valgrind options.
    push @vg, split ' ', $UseValgrind if $UseValgrind !~ /^\d+$/;

    # Readiness is judged by the port being listened on: it must be free
    # first (the previous nginx may take a moment to let go of it).
    for (1 .. 50) {
        last unless listening($ServerPort);
        sleep 0.1;
    }

    return "port $ServerPort is in use by another process"
        if listening($ServerPort);

    $LogStart = -s err_log_file() || 0;
    $Pid = spawn(@vg, @cmd);
    $IsChild = 1;

    # Valgrind takes seconds to get nginx to listen().
    my $deadline = time + 20;

    while (time < $deadline) {
        if (waitpid($Pid, WNOHANG) == $Pid) {
            my $status = $?;
            undef $Pid;

            return "nginx under valgrind exited with status "
                   . ($status >> 8) . ":\n"
                   . read_from(err_log_file(), $LogStart)
                   . read_from(log_dir() . '/nginx.stderr', 0)
                   . read_from(log_dir() . '/valgrind.log', 0);
        }

        return undef if listening($ServerPort);

        sleep 0.1;
    }

    return "nginx under valgrind did not listen on port $ServerPort in 20 s";
}

# fork + exec with stdout and stderr going to logs/nginx.stderr.
sub spawn {
    my (@cmd) = @_;

    my $out = log_dir() . '/nginx.stderr';

    my $pid = fork;
    die "fork: $!\n" unless defined $pid;

    if ($pid == 0) {
        # Own process group, so a stuck nginx can be killed with its children.
        setpgrp;
        open STDOUT, '>', $out or _exit(127);
        open STDERR, '>&', \*STDOUT or _exit(127);
        { no warnings 'exec'; exec { $cmd[0] } @cmd; }
        print STDERR "exec $cmd[0]: $!\n";
        _exit(127);    # no END blocks, no Test::Builder summary here
    }

    return $pid;
}

# Whether some socket listens on the TCP port.  Read from /proc rather than
# by connecting, which would leave an extra connection in error.log.
sub listening {
    my ($port) = @_;

    my $hex = sprintf '%04X', $port;

    for my $table ('/proc/net/tcp', '/proc/net/tcp6') {
        open my $fh, '<', $table or next;
        while (<$fh>) {
            # "sl local_address rem_address st": st 0A is LISTEN.
            my (undef, $local, undef, $state) = split ' ';
            return 1 if $local =~ /:$hex$/ && $state eq '0A';
        }
    }

    return 0;
}

sub running {
    return defined $Pid && alive($Pid) && ($IsChild || looks_like_nginx($Pid));
}

# Stops the nginx we started (or one left behind in the pid file by an
# earlier run): SIGQUIT, wait up to $grace seconds, then SIGKILL.  Returns
# a hash: killed => it had to be killed, status => wait status (valgrind
# mode only).
sub stop {
    my ($grace) = @_;

    my $pid = $Pid;
    my $child = $IsChild;

    if (!defined $pid) {
        $pid = read_pid_file();
        $child = 0;
    }

    # A daemon that is gone, or a stale pid file: the pid may name
    # someone else's process by now.
    if (!$child && !($pid && looks_like_nginx($pid))) {
        undef $Pid;
        unlink pid_file();
        return {};
    }

    undef $Pid;

    my %r;

    kill 'QUIT', $pid;

    my $deadline = time + $grace;
    while (time < $deadline) {
        last if !process_alive($pid, $child, \%r);
        sleep 0.05;
    }

    if (process_alive($pid, $child, \%r)) {
        $r{killed} = 1;
        kill 'KILL', $child ? -$pid : $pid;
        if ($child) {
            waitpid $pid, 0;
        } else {
            for (1 .. 100) {
                last unless alive($pid) && looks_like_nginx($pid);
                sleep 0.05;
            }
        }
    }

    unlink pid_file();

    return \%r;
}

sub process_alive {
    my ($pid, $child, $r) = @_;

    if ($child) {
        return 1 if waitpid($pid, WNOHANG) == 0;
        $r->{status} //= $?;
        return 0;
    }

    return alive($pid) && looks_like_nginx($pid);
}

# kill 0 also succeeds on a zombie: a daemonized nginx is not our child and
# whoever adopts it may be slow to reap it.
sub alive {
    my ($pid) = @_;

    return 0 unless kill 0, $pid;

    if (open my $fh, '<', "/proc/$pid/stat") {
        my $stat = <$fh> // '';
        return 0 if $stat =~ /\)\s+Z\s/;
    }

    return 1;
}

# The nginx of this server root: pids are reused (32768 of them on a
# small machine, and a CI run starts many processes), and a pid file left
# behind may name another stage's nginx by now.  Its command line (its
# master's title keeps the arguments) names the server root.
sub looks_like_nginx {
    my ($pid) = @_;

    open my $fh, '<', "/proc/$pid/cmdline" or return 0;
    my $cmdline = do { local $/; <$fh> } // '';

    return $cmdline =~ /nginx|valgrind/ && index($cmdline, "$ServRoot/") >= 0;
}

sub read_pid_file {
    open my $fh, '<', pid_file() or return undef;
    my $pid = <$fh> // '';
    return $pid =~ /^(\d+)/ ? $1 : undef;
}

# What valgrind reported, or '' (valgrind.log only holds reports: -q).
sub valgrind_log {
    return read_from(log_dir() . '/valgrind.log', 0);
}

sub read_from {
    my ($file, $offset) = @_;

    open my $fh, '<', $file or return '';
    binmode $fh;
    seek $fh, $offset, 0 if $offset;

    return do { local $/; <$fh> } // '';
}

sub write_file {
    my ($file, $data) = @_;

    open my $fh, '>', $file or die "cannot write $file: $!\n";
    binmode $fh;
    print $fh $data;
    close $fh or die "cannot write $file: $!\n";
}

1;
