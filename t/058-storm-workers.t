# The retry budget and the breaker are the upstream's, not a worker's: two
# workers (reuseport spreads the calls over both) spend one budget and see
# one breaker; a reload keeps both (the zone is adopted), also when the new
# configuration adds an upstream.  A worker two reloads old, still finishing
# a call, counts into no node a reload freed: its counts are lost, never
# another upstream's.
#
# Plain Test::More: this needs a master process, two workers and a reload,
# which is outside the Test::Nginx format.

use strict;
use warnings;
use Test::More;
use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw(sleep);

use lib 't/lib';
use IdemNginx;

my $port = IdemNginx::base_port() + 120;
my $ng = IdemNginx->new(name => 'storm', port => $port, workers => 2,
                        worker_connections => 256);

sub write_conf {
    my ($extra, $locations) = @_;
    $locations //= '';

    $ng->write_conf(<<"HTTP");
    upstream budget {
        server 127.0.0.1:$port;
    }
    upstream brk {
        server 127.0.0.1:$port;
    }
    $extra
    server {
        listen 127.0.0.1:$port reuseport;
        add_header X-Worker \$pid always;
        location /t {
            idem on;
            idem_idempotent on;
            idem_retry 3 backoff=1ms;
            idem_retry_budget ratio=0 min=1 window=30s;
            add_header X-Attempts \$idem_attempts always;
            add_header X-Worker \$pid always;
            proxy_pass http://budget/fail;
        }
        location /b/ {
            idem on;
            idem_breaker failures=50% min_calls=2 open=30s;
            add_header X-Attempts \$idem_attempts always;
            add_header X-Worker \$pid always;
            proxy_pass http://brk/code/;
        }
        location /fail {
            return 503;
        }
        location /code/ok {
            return 200 "ok\\n";
        }
        location /code/fail {
            return 503;
        }
        location /metrics {
            idem_metrics;
        }
        $locations
    }
HTTP
}

sub call {
    my ($path) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => 10) or return {};
    print $s "GET $path HTTP/1.0\r\nHost: localhost\r\n\r\n";
    local $/;
    my $res = <$s> // '';
    my ($head, $body) = split /\r\n\r\n/, $res, 2;
    $head //= '';
    my %r = (body => $body // '');
    ($r{code}) = $head =~ m{^HTTP/1\.\d (\d+)};
    ($r{attempts}) = $head =~ m{^X-Attempts: (\d+)}mi;
    ($r{worker}) = $head =~ m{^X-Worker: (\d+)}mi;
    ($r{retry_after}) = $head =~ m{^Retry-After: (\d+)}mi;
    return \%r;
}

sub metric {
    my ($name) = @_;
    my $m = call('/metrics')->{body} // '';
    return $m =~ /^\Q$name\E (\d+)$/m ? $1 : undef;
}

write_conf('');

ok($ng->start, 'nginx starts')
    or BAIL_OUT('nginx does not start: ' . $ng->out);

# one budget: 1 retry per second x 30 s = 30 retries, for both workers

my (%workers, $retries, $ones);
for (1 .. 40) {
    my $r = call('/t');
    $workers{$r->{worker}}++ if $r->{worker};
    $retries += ($r->{attempts} // 1) - 1;
    $ones++ if ($r->{attempts} // 0) == 1;
}

cmp_ok(scalar keys %workers, '>=', 2, 'both workers served calls')
    or diag explain \%workers;
is($retries, 30, 'the two workers made 30 retries together, not 30 each');
is($ones, 25, '25 calls got no retry');
is(metric('idem_retry_budget_exhausted_total{upstream="budget"}'), 25,
   'idem_retry_budget_exhausted_total counts the 25 refusals');

# one breaker: two failures open it for every worker

is(call('/b/fail')->{code}, 503, 'a failure');
is(call('/b/fail')->{code}, 503, 'a second failure opens the breaker');

# reuseport hashes each connection to a worker: 12 calls, then more
# until both workers have refused one (12 on one worker: 1 in 2048)
my (%refusing, $sent, $n);
while (++$n <= 12 || (keys %refusing < 2 && $n <= 64)) {
    my $r = call('/b/ok');
    $sent++ if ($r->{attempts} // 0) != 0 || $r->{code} != 503;
    $refusing{$r->{worker}}++
        if $r->{worker} && $r->{body} =~ /upstream-unavailable/;
}

ok(!$sent, 'no call went through the open breaker');
cmp_ok(scalar keys %refusing, '>=', 2, 'both workers refused calls')
    or diag explain \%refusing;

# a reload: the zone is adopted, the budget and the breaker carry on

# until every worker from before the reload has gone and two new ones run:
# asking the workers who answers can miss one that answered no sample
sub reload {
    my %before = map { $_ => 1 } $ng->children;
    ok($ng->reload, 'reload');
    for (1 .. 200) {
        sleep 0.1;
        my @now = $ng->children;
        last if @now >= 2 && !grep { $before{$_} } @now;
    }
}

reload();

my $r = call('/b/ok');
is($r->{code}, 503, 'after the reload the breaker is still open');
like($r->{body}, qr/upstream-unavailable/, '... and answers the call itself');
cmp_ok($r->{retry_after}, '>', 20, '... with the time it has left');

$r = call('/t');
is($r->{attempts}, 1, 'after the reload the budget is still spent');
cmp_ok(metric('idem_retry_budget_exhausted_total{upstream="budget"}'),
       '>=', 26, 'the counter carried on');

# a reload that adds an upstream keeps the zone too

write_conf("upstream more { server 127.0.0.1:$port; }");
reload();

$r = call('/b/ok');
is($r->{code}, 503, 'a new upstream: the breaker is still open');
like($r->{body}, qr/upstream-unavailable/, '... answered by the gateway');
is(metric('idem_breaker_state{upstream="more"}'), 0,
   'the new upstream has its own, closed breaker');

# upstreams renamed in every deploy (as an implicit upstream is when its
# address changes): the nodes no configuration names are freed, so the zone
# never fills up, however many reloads.  14 upstreams: room for 64 nodes;
# 10 reloads rename 12 of them, 120 names in all.

for my $g (1 .. 10) {
    write_conf(join("\n", map { "upstream r${g}x$_ { server 127.0.0.1:$port; }" }
                              1 .. 12),
               "location /rn/ { idem on; idem_breaker failures=50% "
               . "min_calls=2 open=30s; proxy_pass http://r${g}x1/code/; }");
    reload();
}

my $m = call('/metrics')->{body} // '';
my @on = grep { $m =~ /^idem_breaker_state\{upstream="r10x$_"\} 0$/m } 1 .. 12;
is(scalar @on, 12, 'after 10 renaming reloads every upstream has a breaker')
    or diag $m;
unlike($m, qr/upstream="r9x/, 'the names of the configuration before are gone');

is(call('/rn/fail')->{code}, 503, 'a renamed upstream: a failure');
is(call('/rn/fail')->{code}, 503, '... a second one opens its breaker');
like(call('/rn/ok')->{body}, qr/upstream-unavailable/,
     '... which answers the next call itself');
is(metric('idem_breaker_state{upstream="r10x1"}'), 1, '... and shows open');

$ng->stop;

my $log = $ng->log_text;
unlike($log, qr/\[(?:alert|crit|emerg)\]|exited on signal/,
       'no alert, no crash in the error log');
unlike($log, qr/no room in the "idem_storm" zone/,
       'the zone never ran out of room');

# Issue 35: a call in flight across two reloads.  Its worker (of the
# first configuration) ends it after the second reload has freed the node
# of its upstream, whose memory the new upstream's node may take: its 502
# must not count there.  The upstream is this process: a listener whose
# calls it answers itself, so a call is held for as long as the test needs.

my $gport = $port + 1;
my $up_port = $port + 2;
my $up = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$up_port",
                               Listen => 16, ReuseAddr => 1)
    or BAIL_OUT("listen on $up_port: $!");
my $gen = IdemNginx->new(name => 'storm-gen', port => $gport, workers => 2);

# one upstream{} per name, location /NAME/ proxies to it
sub gen_conf {
    my $conf = join '', map { <<"UP" } @_;
    upstream $_ { server 127.0.0.1:$up_port; }
UP
    my $locs = join '', map { <<"LOC" } @_;
        location /$_/ {
            idem on;
            idem_breaker failures=1% min_calls=1 window=60s open=60s;
            proxy_read_timeout 300s;
            proxy_pass http://$_/;
        }
LOC
    $gen->write_conf(<<"HTTP");
$conf
    server {
        listen 127.0.0.1:$gport reuseport;
$locs
        location /metrics {
            idem_metrics;
        }
    }
HTTP
}

sub gen_send {
    my ($path) = @_;
    my $c = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$gport",
                                  Timeout => 10) or return undef;
    print $c "GET $path HTTP/1.0\r\nHost: localhost\r\n\r\n";
    return $c;
}

sub gen_read {
    my ($c) = @_;
    local $/;
    my $res = <$c> // '';
    my ($code) = $res =~ m{^HTTP/1\.\d (\d+)};
    return ($code // 0, $res);
}

# the next call the gateway forwards, its request head read; undef if none
# comes within $secs
sub up_accept {
    my ($secs) = @_;
    IO::Select->new($up)->can_read($secs) or return undef;
    my $u = $up->accept or return undef;
    my $head = '';
    my $sel = IO::Select->new($u);
    while ($head !~ /\r\n\r\n/ && $sel->can_read(30)) {
        sysread($u, $head, 4096, length $head) or last;
    }
    return $u;
}

sub up_answer {
    my ($u, $code) = @_;
    print $u "HTTP/1.1 $code X\r\nContent-Length: 3\r\n"
             . "Connection: close\r\n\r\nup\n";
    close $u;
}

# a call: answered by the gateway itself (an open breaker), or forwarded
# and answered $code here, whichever happens
sub gen_call {
    my ($path, $code) = @_;
    my $c = gen_send($path) or return (0, '');
    my $sel = IO::Select->new($c, $up);
    while (my @ready = $sel->can_read(60)) {
        last if grep { $_ == $c } @ready;
        $sel->remove($up);
        my $u = up_accept(0);
        up_answer($u, $code) if $u;
    }
    return gen_read($c);
}

# HUP; true once the workers of the configuration before have gone (but
# those in @keep: the first configuration's, one of them holding a call)
# and two new ones run
sub gen_reload {
    my %keep = map { $_ => 1 } @_;
    my %before = map { $_ => 1 } grep { !$keep{$_} } $gen->children;
    $gen->reload or return 0;
    for (1 .. 600) {
        sleep 0.1;
        my @now = grep { !$keep{$_} } $gen->children;
        return 1 if @now >= 2 && !grep { $before{$_} } @now;
    }
    return 0;
}

# a call through $first held by its worker across a reload to each list
# of upstream names in @renames; the client's and the upstream's sockets
sub hold_across {
    my ($first, @renames) = @_;
    my $c = gen_send("/$first/slow") or return;
    my $u = up_accept(60) or return;
    my @a = $gen->children;     # the holder among them: it forwarded
    for my $names (@renames) {
        gen_conf(@$names);
        ok(gen_reload(@a), "reload to @$names") or return;
    }
    my %a = map { $_ => 1 } @a;
    ok(scalar(grep { $a{$_} } $gen->children),
       'a worker of the first configuration still runs, holding the call');
    return ($c, $u);
}

# the exact scenario: _a, then _b, then _c a second later; the call
# through _a answers 502 when _c runs

gen_conf('backend_generation_a');
ok($gen->start, 'the generation gateway starts')
    or BAIL_OUT('nginx does not start: ' . $gen->out);

my ($c, $u) = hold_across('backend_generation_a',
                          ['backend_generation_b'], ['backend_generation_c']);
ok($u, 'a call through backend_generation_a is held across two reloads');

my $pos = $gen->log_pos;
up_answer($u, 502);
my ($code) = gen_read($c);
is($code, 502, 'the held call ends with its 502');

ok($gen->wait_log(qr/upstream "backend_generation_a" .* its counts are lost/,
                  $pos), 'its worker says its counts are lost');

($code) = gen_call('/backend_generation_c/ok', 200);
is($code, 200, 'backend_generation_c, which never failed, answers 200');
unlike(substr($gen->log_text, $pos), qr/breaker of upstream .* opens/,
       'no breaker opened');

# lost, not landed elsewhere: through three reloads, the third naming
# the held call's upstream again (a new node), _c (whose node may have
# the memory of the call's) and a new one (which may take another freed
# node's): none of them counts the 502

$gen->stop or fail('the generation gateway stops');
gen_conf('backend_generation_a');
ok($gen->start, 'the generation gateway starts again')
    or BAIL_OUT('nginx does not start: ' . $gen->out);

($c, $u) = hold_across('backend_generation_a',
                       ['backend_generation_b'], ['backend_generation_c'],
                       ['backend_generation_a', 'backend_generation_c',
                        'backend_generation_d']);
ok($u, 'a call through backend_generation_a is held across three reloads');

$pos = $gen->log_pos;
up_answer($u, 502);
($code) = gen_read($c);
is($code, 502, 'the held call ends with its 502');
ok($gen->wait_log(qr/its counts are lost/, $pos),
   'its worker says its counts are lost');

for my $name (map { "backend_generation_$_" } qw(a c d)) {
    ($code) = gen_call("/$name/ok", 200);
    is($code, 200, "$name answers 200: the 502 did not count there");
}

($code, $m) = gen_call('/metrics', 200);
for my $name (map { "backend_generation_$_" } qw(a c d)) {
    like($m, qr/^idem_breaker_state\{upstream="$name"\} 0$/m,
         "${name}'s breaker is closed");
}
unlike(substr($gen->log_text, $pos), qr/breaker of upstream .* opens/,
       'no breaker opened');

$gen->stop or fail('the generation gateway stops');
is(join("\n", $gen->bad_lines(with_error => 1)), '',
   'no error, alert or crash in its log');

done_testing();
