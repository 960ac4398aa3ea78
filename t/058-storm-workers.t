# The retry budget and the breaker are the upstream's, not a worker's: two
# workers (reuseport spreads the calls over both) spend one budget and see
# one breaker; a reload keeps both (the zone is adopted), also when the new
# configuration adds an upstream.
#
# Plain Test::More: this needs a master process, two workers and a reload,
# which is outside the Test::Nginx format.

use strict;
use warnings;
use Test::More;
use IO::Socket::INET;
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

my (%refusing, $sent);
for (1 .. 12) {
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

done_testing();
