# The configurations the docs show run as they say: every file of
# conf-examples/ starts with "make run EXAMPLE=<name>" (util/run.sh, the
# module already built) and serves the calls its header lists; a port
# taken is one line naming it and its variable, and exit status 1; make
# run installs no test tools; README's quick start answers as it shows;
# README's example configuration, as a package's nginx would include it,
# passes nginx -t and serves a call.

use strict;
use warnings;
use Test::More;
use IO::Socket::INET;
use POSIX qw(WNOHANG setpgid);
use Time::HiRes qw(sleep time);
use lib 't/lib';
use IdemNginx;

my $root = IdemNginx::root();
my $base = IdemNginx::base_port();

# ports of their own, above those the other files derive
my $port = $base + 90;
my $backend_port = $base + 91;
my $redis_port = ($ENV{TEST_NGINX_REDIS_PORT} || 16379) + 500;

my ($module) = grep { /ngx_http_idem_module\.so$/ }
               split ' ', ($ENV{TEST_NGINX_LOAD_MODULES} || '');
$module ||= "$root/build/ngx_http_idem_module.so";

my %env = (
    PORT => $port,
    BACKEND_PORT => $backend_port,
    REDIS_PORT => $redis_port,
    IDEM_MODULE => $module,
    NGINX_BIN => IdemNginx::binary() =~ m{/} ? IdemNginx::binary()
                                             : '/usr/sbin/nginx',
);

# util/run.sh in a process group of its own, its output in a file
sub run_example {
    my ($example, %over) = @_;
    my $out = "$root/t/servroot-run-$port.out";
    unlink $out;
    my $pid = fork // die "fork: $!\n";
    if ($pid == 0) {
        setpgid(0, 0);
        %ENV = (%ENV, %env, EXAMPLE => $example,
                RUN_DIR => "$root/t/servroot-run-$port", %over);
        open STDOUT, '>', $out or die;
        open STDERR, '>&', \*STDOUT or die;
        exec "$root/util/run.sh" or die "exec: $!\n";
    }
    return ($pid, $out);
}

sub slurp {
    open my $fh, '<', $_[0] or return '';
    local $/;
    return <$fh> // '';
}

# the scripts that ended, reaped: their pids may be anyone's by now
my %reaped;

# until the banner's last line or the script's end; its exit status then
sub wait_banner {
    my ($pid, $out, $secs) = @_;
    my $until = time + $secs;
    while (time < $until) {
        return 'up' if slurp($out) =~ /^Ctrl-C stops it all\.$/m;
        my $r = waitpid($pid, WNOHANG);
        if ($r == $pid) {
            $reaped{$pid} = 1;
            return "exit " . ($? >> 8);
        }
        sleep 0.2;
    }
    return 'timeout';
}

# TERM to the script (its trap stops nginx and redis, exit 0), then the
# group; nothing to a script that ended (its trap stopped what it ran)
sub stop_example {
    my ($pid) = @_;
    return 0 if delete $reaped{$pid};
    kill 'TERM', $pid;
    for (1 .. 300) {
        return $? == 0 if waitpid($pid, WNOHANG) == $pid;
        sleep 0.1;
    }
    kill 'KILL', -$pid;
    waitpid($pid, 0);
    return 0;
}

# the curl commands of an example's header: "#   curl ..." lines, with
# their continuations (a "# NNN" after one: the status it answers)
sub header_calls {
    my ($file) = @_;
    my (@calls, $cur);
    for (split /\n/, slurp($file)) {
        last unless /^#/;
        s/^#\s*//;
        if (defined $cur) {
            $cur .= " $_";
        } elsif (/^curl /) {
            $cur = $_;
        } else {
            next;
        }
        if ($cur =~ s/\s*\\$//) {
            next;
        }
        push @calls, $cur;
        undef $cur;
    }
    return @calls;
}

# a header's curl, on this run's port, with the status code appended
sub curl {
    my ($cmd) = @_;
    $cmd =~ s/127\.0\.0\.1:8080\b/127.0.0.1:$port/g;
    $cmd =~ s/^curl /curl -sS --max-time 10 -w '\\n%{http_code}' /;
    my $text = `$cmd 2>&1`;
    my ($code) = $text =~ /(\d{3})\s*\z/;
    return ($code // 0, $text);
}

sub bindable {
    return IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                 LocalPort => $_[0], Listen => 1,
                                 ReuseAddr => 1);
}

# a REDIS_PORT whose 6 nodes and 6 bus ports (+100) are all free
sub cluster_port {
    for my $k (0 .. 30) {
        my $p = $redis_port + 20 + 7 * $k;
        return $p unless grep { !bindable($_) }
                         map { ($p + $_, $p + 100 + $_) } 0 .. 5;
    }
    return $redis_port + 20;
}

my @examples = map { m{/([^/]+)\.conf$} }
               sort glob("$root/conf-examples/*.conf");
ok(@examples >= 7, "conf-examples/ has its examples");

for my $ex (@examples) {
    my $file = "$root/conf-examples/$ex.conf";
    my $cmd = $ex eq 'quickstart' ? 'make run' : "make run EXAMPLE=$ex";

    like(slurp($file), qr/^# Run it from a clone: \Q$cmd\E$/m,
         "$ex: its header states the command");

    my @calls = header_calls($file);
    ok(@calls >= 1, "$ex: its header lists a first call") or next;

    # the cluster's own ports (nodes and their buses): those the single
    # Redis or a run just before used may be some closed connection's
    # local port still (TIME_WAIT), not free to bind
    my ($pid, $out) = run_example($ex, $ex eq 'redis-cluster'
                                       ? (REDIS_PORT => cluster_port())
                                       : ());
    my $up = wait_banner($pid, $out, $ex eq 'redis-cluster' ? 150 : 90);
    is($up, 'up', "$ex: make run starts it") or do {
        diag(slurp($out));
        stop_example($pid);
        next;
    };

    # the first call reaches the demo backend
    my ($code, $text) = curl($calls[0]);
    is($code, 200, "$ex: the first call is answered 200") or diag($text);
    like($text, qr/"backend": "demo"/, "$ex: it reached the demo backend");

    # the calls after it (status reads, metrics): the status endpoint may
    # read before the first call's record is written (another worker):
    # asked again while it is not found
    my $slow = 0;
    for my $i (1 .. $#calls) {
        my $call = $calls[$i];
        my $want = $call =~ s/\s+#.*?\b(\d{3})\b.*$// ? $1 : 200;
        my $until = time + 10;
        do {
            ($code, $text) = curl($call);
        } while ($code == 404 && $want != 404 && time < $until
                 && sleep 0.2);
        is($code, $want, "$ex: call " . ($i + 1) . " of its header")
            or diag("$call\n$text");

        # the demo backend's slow path: the call ends UNKNOWN, the list
        # of the calls that need a person shows it, and its page has the
        # form that settles it
        my ($id) = $call =~ m{X-Call-Id: ([\w.:~-]+)'.*/slow\b} or next;
        $slow++;
        ($code, $text) = curl("curl -s http://127.0.0.1:8080/_idem/calls/$id");
        like($text, qr/"state":"UNKNOWN".*"outcome":"deadline","sent":true/,
             "$ex: the slow call ended UNKNOWN") or diag($text);
        ($code, $text) = curl("curl -s http://127.0.0.1:8080/_idem/calls/");
        like($text, qr/"call_id":"\Q$id\E","state":"UNKNOWN"/,
             "$ex: the list shows it") or diag($text);
        ($code, $text) = curl("curl -s -H 'Accept: text/html'"
                              . " http://127.0.0.1:8080/_idem/calls/$id");
        like($text, qr/<form method="post"[^>]*>.*value="not_applied"/s,
             "$ex: its page has the form that settles it") or diag($text);
    }

    ok(stop_example($pid), "$ex: stops on TERM, exit status 0");
    my $log = slurp("$root/t/servroot-run-$port/logs/error.log");
    # nginx's own line for each slow call's attempt ended by its deadline
    my $line = '^.*\[error\] .* upstream timed out .*'
               . ' request: "\S+ \S*/slow HTTP.*\n';
    my $timeouts = ($log =~ s/$line//mg) || 0;
    is($timeouts, $slow, "$ex: nginx's timeout line, for each slow call");
    unlike($log, qr/\[(?:error|crit|alert|emerg)\]/, "$ex: no error logged")
        or diag($log);
    ok(!IO::Socket::INET->new("127.0.0.1:$port"), "$ex: nginx is gone");
}

# the ports make run puts in are never taken for ones an example names: a
# PORT of 9xxx is not one of the examples' upstreams (9301, ...), a
# BACKEND_PORT of 6380 not their Redis, a REDIS_PORT of 8081 not their
# backend (they were, each rewritten again: in CI, t/009 on ports
# 9090-9091 had every example's gateway listen on its backend's port)
{
    my $conf = do {
        local %ENV = (%ENV, EXAMPLE => 'dedupe', PORT => 9090,
                      BACKEND_PORT => 6380, REDIS_PORT => 8081,
                      RUN_CONF_ONLY => 1,
                      RUN_DIR => "$root/t/servroot-runconf-$port");
        `$root/util/run.sh 2>&1`;
    };
    $conf =~ s/^\s*#.*\n//mg;
    is($?, 0, 'RUN_CONF_ONLY: the example as make run writes it');
    is(join(' ', $conf =~ /^\s*listen\s+(\S+);/mg), '127.0.0.1:9090',
       'PORT=9090: the gateway listens there, only');
    my @up = $conf =~ m{_pass\s+\w+://(\S+);}g;
    ok(@up >= 2 && !grep({ $_ ne '127.0.0.1:6380' } @up),
       'BACKEND_PORT=6380: every upstream is the backend') or diag("@up");
    like($conf, qr/^\s*idem_redis\s+127\.0\.0\.1:8081\b/m,
         'REDIS_PORT=8081: Redis is there');
}

# a page's shell session ("    $ curl ..." lines, with their output),
# command by command, on make run's gateway: each answers the status its
# output shows (an HTTP/1.1 line, a "status" member, NOT_FOUND, a "# NNN"
# comment; else 200); with $states, the "state" members it shows too
sub doc_steps {
    my ($text) = @_;
    my (@steps, $cur);
    for (split /\n/, $text // '') {
        if (defined $cur && $cur->{cmd} =~ /\\$/) {
            $cur->{cmd} =~ s/\s*\\$/ /;
            (my $more = $_) =~ s/^\s+//;
            $cur->{cmd} .= $more;
        } elsif (/^    \$ (curl .*)$/) {
            push @steps, $cur = { cmd => $1, out => '' };
        } elsif (defined $cur && /^    /) {
            $cur->{out} .= "$_\n";
        } elsif (!/^\s*$/) {
            undef $cur;
        }
    }
    return @steps;
}

sub run_steps {
    my ($what, $example, $states, @steps) = @_;
    my ($pid, $out) = run_example($example);
    is(wait_banner($pid, $out, 90), 'up', "$what: make run")
        or diag(slurp($out));

    for my $step (@steps) {
        my $cmd = $step->{cmd};
        $cmd =~ s/\s*\|.*$//;                # the output's own filter
        my $want = $cmd =~ s/\s*#.*?\b(\d{3})\b.*$// ? $1
                 : $step->{out} =~ m{^\s*HTTP/1\.1 (\d{3})}m ? $1
                 : $step->{out} =~ /"status":(\d{3})\b/ ? $1
                 : $step->{out} =~ /NOT_FOUND/ ? 404
                 : 200;
        $cmd =~ s/\s*#.*$//;
        # a record or a stored answer is written from the log phase: a
        # read may come first, a resend may meet the claim in flight
        my $until = time + 10;
        my ($code, $text);
        do {
            ($code, $text) = curl($cmd);
        } while ($code != $want && ($code == 404 || $code == 409)
                 && time < $until && sleep 0.2);
        is($code, $want, "$what: $cmd") or diag($text);
        next unless $states;
        for my $state ($step->{out} =~ /("state":"[A-Z_]+")/g) {
            like($text, qr/\Q$state\E/, "$what: $cmd: $state")
                or diag($text);
        }
    }
    ok(stop_example($pid), "$what: make run stops");
}

{
    my ($quick) = slurp("$root/README.md")
                  =~ /^## Quick start\n(.*?)^## /ms;
    my @steps = doc_steps($quick);
    ok(@steps >= 10, "README's quick start has its calls");
    run_steps("README's quick start", 'quickstart', 0, @steps);
}

# docs/operating.md's first UNKNOWN call, on make run EXAMPLE=records: the
# slow call, the list, the resolution, the list again, each as shown
{
    my ($walk) = slurp("$root/docs/operating.md")
                 =~ /^## Your first UNKNOWN call\n(.*?)(?=^## |\z)/ms;
    like($walk // '', qr/^    make run EXAMPLE=records$/m,
         'the first UNKNOWN call: on the records example');
    my @steps = doc_steps($walk);
    is(scalar @steps, 4, 'the first UNKNOWN call: its four calls');
    run_steps('the first UNKNOWN call', 'records', 1, @steps);
}

# a taken port: one line that names it and its variable, exit 1, and
# nothing started (the banner never printed)
for my $var (qw(PORT BACKEND_PORT REDIS_PORT)) {
    my $taken = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                      LocalPort => $env{$var}, Listen => 1,
                                      ReuseAddr => 1)
        or BAIL_OUT("cannot listen on $env{$var}: $!");
    my ($pid, $out) = run_example('quickstart');
    my $end = wait_banner($pid, $out, 30);
    is($end, 'exit 1', "$var taken: exit status 1") or stop_example($pid);
    my $text = slurp($out);
    my @lines = split /\n/, $text;
    is(scalar @lines, 1, "$var taken: one line") or diag($text);
    like($lines[0] // '', qr/\bport $env{$var}\b.*\b\Q$var\E=/,
         "$var taken: the line names the port and $var");
    close $taken;
}

# an example that is not there: one line listing those that are
{
    my ($pid, $out) = run_example('no-such-example');
    is(wait_banner($pid, $out, 30), 'exit 1', 'unknown EXAMPLE: exit 1');
    like(slurp($out),
         qr/^make run: no example 'no-such-example'.*quickstart.*\n\z/,
         'unknown EXAMPLE: one line naming the examples');
}

# make run installs what running needs; make test the rest
{
    my $run = `$root/util/deps.sh --list run`;
    my $all = `$root/util/deps.sh --list`;
    for my $p (qw(nginx nginx-dev libhiredis-dev uuid-dev redis-server)) {
        like($run, qr/(?:^|\s)\Q$p\E(?:\s|$)/, "make run installs $p");
    }
    for my $p (qw(chromium python3-grpcio python3-redis
                  libnginx-mod-http-echo libtest-base-perl)) {
        unlike($run, qr/(?:^|\s)\Q$p\E(?:\s|$)/, "make run leaves $p out");
        like($all, qr/(?:^|\s)\Q$p\E(?:\s|$)/, "make test installs $p");
    }
}

# README's example configuration as the package's nginx includes it
# (inside http {}, the module loaded): only the ports and the log path
# are this test's; a backend on the upstreams' port answers
{
    my ($block) = slurp("$root/README.md")
                  =~ /^## Example configuration\n.*?^```nginx\n(.*?)^```$/ms;
    ok(defined $block, "README has its example configuration") or last;
    unlike($block, qr/^\s*load_module/m,
           "README's example loads no module (the package did)");

    my $ng = IdemNginx->new(name => 'readme', port => $port);
    my $sr = $ng->servroot;
    my $redis = $ENV{TEST_NGINX_REDIS_PORT} || 16379;
    (my $conf = $block) =~ s/^(\s*listen\s+)8080;/${1}127.0.0.1:$port;/m;
    $conf =~ s/127\.0\.0\.1:900\d/127.0.0.1:$backend_port/g;
    $conf =~ s/127\.0\.0\.1:6379/127.0.0.1:$redis/g;
    $conf =~ s{/var/log/nginx/}{$sr/logs/}g;
    $ng->write_conf(<<"HTTP", workers => 2);
$conf
    server {
        listen 127.0.0.1:$backend_port;
        location / { return 200 'from $backend_port\\n'; }
    }
HTTP
    my $cmd = IdemNginx::binary() . " -t -p $sr/ -c " . $ng->conf_file
              . ' -e ' . $ng->error_log;
    my $t = `$cmd 2>&1`;
    is($?, 0, "README's example: nginx -t") or diag($t);
    unlike($t, qr/\[(?:warn|emerg)\]/, "README's example: no warning");

    $ng->start or BAIL_OUT('nginx does not start: ' . $ng->out);
    my $id = "pay-readme-" . int(rand 1e9);
    my $pay = "curl -si -H 'X-Call-Id: $id' -H 'Authorization: Bearer t9'"
              . " -d 'amount=5' http://127.0.0.1:8080/payments";
    my ($code, $text) = curl($pay);
    is($code, 200, "README's example: POST /payments") or diag($text);
    # the first call's answer is stored from its log phase: a resend may
    # meet the claim still in flight (409) on the other worker
    my $until = time + 10;
    do {
        ($code, $text) = curl($pay);
    } while ($code == 409 && time < $until && sleep 0.2);
    like($text, qr/^Idempotent-Replayed: true/mi,
         "README's example: the same call again is replayed") or diag($text);
    $until = time + 10;
    do {
        ($code, $text) = curl("curl -s -H 'Authorization: Bearer t9'"
                              . " http://127.0.0.1:8080/calls/$id");
    } while ($code == 404 && time < $until && sleep 0.2);
    like($text, qr/"state":"SUCCESS"/, "README's example: its status")
        or diag($text);
    ($code, $text) = curl("curl -s http://127.0.0.1:8080/_idem/metrics");
    like($text, qr/^idem_dedupe_total\{result="replayed"\} 1$/m,
         "README's example: the metrics") or diag($text);
    ok($ng->stop, "README's example: nginx stops");
    unlike($ng->log_text, qr/\[(?:error|crit|alert|emerg)\]/,
           "README's example: no error logged");
}

done_testing();
