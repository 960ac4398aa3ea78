# Duplicate suppression under real concurrency (idem_dedupe on):
#
#  1. one gateway, 50 clients sending the same call id and body at the same
#     moment: exactly one request reaches the backend; one client gets the
#     original 200, every other one a 409 call-in-flight (problem+json,
#     Retry-After, Link to the status URL) or a 200 replay
#     (Idempotent-Replayed: true) byte-identical to the original; afterwards
#     the id replays and its record says SUCCESS with one execution;
#  2. two gateways on one Redis: for each of 20 ids the same call is sent to
#     both at once; exactly one of them reaches the backend (20 executions
#     in all), the other answers 409 call-in-flight or a replay;
#  3. a different body under a finished id: 422 payload-mismatch, and the
#     backend still saw the call once.
#
# Plain Test::More: this needs two nginx instances with master processes
# and two workers each, and many clients writing at the same moment, which
# is outside the Test::Nginx format.  The gateways and the clients are
# t/lib/IdemGateway.pm's: plain sockets in this one process, all connected
# first, all requests written back to back, then every answer read to EOF
# through IO::Select.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(sleep time);
use lib 't/lib';
use IdemGateway qw(send_all post is_original summary);
use IdemRecord;
use Digest::SHA qw(sha256_hex);

my $redis = $ENV{TEST_NGINX_REDIS_PORT}
    or plan skip_all => 'TEST_NGINX_REDIS_PORT is not set (use make test)';
my $backend = $ENV{TEST_NGINX_BACKEND_PORT}
    or plan skip_all => 'TEST_NGINX_BACKEND_PORT is not set (use make test)';
my $base = $ENV{TEST_NGINX_SERVER_PORT} || 1984;
my @ports = ($base + 110, $base + 111);

my $prefix = "conc:$$:";          # the Redis keys of this run only
my $timeout = $IdemGateway::Timeout;    # seconds, every network wait
my $clients = 50;
my $pairs = 20;

END {
    local $?;
    IdemGateway::stop_all();
    system("redis-cli -p $redis --scan --pattern '$prefix*' "
           . "| xargs -r redis-cli -p $redis del >/dev/null 2>&1")
        if $redis;
}

start_gateway($_) for @ports;
my ($gw_a, $gw_b) = @ports;


# 1. one gateway, 50 clients, one id

{
    my $id = fresh_id();
    my $body = qq({"order":"$id","qty":1});
    my @res = send_all(map { [$gw_a, post($id, $body)] } 1 .. $clients);

    is(backend_runs($id), 1, "$clients concurrent calls: the backend ran once")
        or diag("call id $id, backend log:\n"
                . join "\n", first_few(split /\n/, backend_log($id)));

    my @orig = grep { defined $_ && is_original($_) } @res;
    is(scalar @orig, 1, 'exactly one client got the original 200')
        or diag("call id $id: " . summary(@res));
    my $orig_body = @orig ? $orig[0]{body} : undef;

    my @bad;
    my %kind;
    for my $i (0 .. $#res) {
        my $r = $res[$i];
        next if defined $r && @orig && $r == $orig[0];
        my $why = duplicate_problem($r, $id, $orig_body);
        if (defined $why) {
            push @bad, "client $i: $why";
        } else {
            $kind{$r->{status} == 409 ? 'in-flight' : 'replay'}++;
        }
    }
    is(scalar @bad, 0, 'every other answer is a 409 call-in-flight or an '
                       . 'identical replay')
        or diag(join "\n", "call id $id", first_few(@bad));
    note(sprintf '%d in flight, %d replayed',
                 $kind{'in-flight'} // 0, $kind{replay} // 0);

    is(scalar(grep { defined $_ && ($_->{h}{'x-call-id'} // '') eq $id } @res),
       $clients, 'every answer carries the call id');

    # the original's answer is stored asynchronously: a duplicate sent the
    # moment it arrived may still read as in flight; wait for the replay
    my $again = settled_answer($gw_a, post($id, $body), $id);
    ok(defined $again && $again->{status} == 200
       && ($again->{h}{'idempotent-replayed'} // '') eq 'true'
       && defined $orig_body && $again->{body} eq $orig_body,
       'a later duplicate is a 200 replay with the same body')
        or diag("call id $id: " . describe($again));

    my $st = settled_status($gw_a, $id);
    ok(defined $st && $st->{status} == 200
       && $st->{body} =~ /"state":"SUCCESS"/
       && $st->{body} =~ /"executions":1[,}]/,
       'the status endpoint says SUCCESS, one execution')
        or diag("call id $id: " . describe($st));

    is(backend_runs($id), 1, 'the backend still ran once');


    # 3. same id, different body

    my $other = send_all([$gw_a, post($id, qq({"order":"$id","qty":2}))]);
    ok(defined $other && $other->{status} == 422
       && content_type_is_problem($other)
       && $other->{body} =~ /"type":"urn:ngx-idem:problem:payload-mismatch"/,
       'a different body under the same id: 422 payload-mismatch')
        or diag("call id $id: " . describe($other));

    is(backend_runs($id), 1, 'the mismatched body never reached the backend');
}


# 2. two gateways, one Redis

{
    my ($ok_pairs, $runs, @bad) = (0, 0);
    my %kind;

    for my $n (1 .. $pairs) {
        my $id = fresh_id();
        my $body = qq({"pair":$n,"id":"$id"});

        # alternate which gateway is written first
        my @gws = $n % 2 ? ($gw_a, $gw_b) : ($gw_b, $gw_a);
        my @res = send_all(map { [$_, post($id, $body)] } @gws);

        my $ran = backend_runs($id);
        $runs += $ran;

        my @orig = grep { defined $_ && is_original($_) } @res;
        my @why;
        push @why, "backend ran $ran times" if $ran != 1;
        push @why, scalar(@orig) . ' originals: ' . summary(@res)
            if @orig != 1;
        if (@orig == 1) {
            my ($dup) = grep { !(defined $_ && $_ == $orig[0]) } @res;
            my $why = duplicate_problem($dup, $id, $orig[0]{body});
            push @why, "duplicate: $why" if defined $why;
            $kind{$dup->{status} == 409 ? 'in-flight' : 'replay'}++
                unless defined $why;
        }

        if (@why) {
            push @bad, "call id $id (first to :$gws[0]): " . join '; ', @why;
        } else {
            $ok_pairs++;
        }
    }

    is($ok_pairs, $pairs, "two gateways, $pairs ids sent to both at once: "
                          . 'one original, one 409 or replay, one execution')
        or diag(join "\n", first_few(@bad));
    is($runs, $pairs, "$pairs backend executions in all");
    note(sprintf 'duplicates: %d in flight, %d replayed',
                 $kind{'in-flight'} // 0, $kind{replay} // 0);
}


# 4. the raw scope (a credential, here) never reaches Redis: the key holds
#    its SHA-256, and no field holds it

{
    my $id = fresh_id();
    my $scope = "Bearer tok-$$-secret";
    my $res = send_all([$gw_a, "POST /s HTTP/1.0\r\nHost: localhost\r\n"
                               . "X-Call-Id: $id\r\nAuthorization: $scope\r\n"
                               . "Content-Length: 1\r\n\r\nx"]);
    is($res && $res->{status}, 200, 'a scoped call is forwarded');

    my $want = "${prefix}s:{" . sha256_hex($scope) . ":$id}";
    my @keys;
    for (1 .. 100) {                  # the final write is asynchronous
        @keys = grep { /\Q$id\E/ }
                split /\n/, `redis-cli -p $redis --scan --pattern '$prefix*'`;
        my %f = IdemRecord::fields($redis, $want);
        last if @keys && defined $f{r};
        sleep 0.05;
    }
    is_deeply(\@keys, [$want], 'its key is s:{<SHA-256 of the scope>:<id>}');

    my %rec = IdemRecord::fields($redis, $want);
    my $dump = join "\n", %rec;
    ok(defined $rec{d}, 'the record holds the claim');
    unlike($dump . join('', @keys), qr/tok-$$-secret/,
           'the raw scope is nowhere in Redis');
}


# both gateways stop cleanly and logged nothing wrong

IdemGateway::stop_all();

for my $port (@ports) {
    my @lines = IdemGateway::bad_lines($port);
    is(scalar @lines, 0, "gateway :$port: no error, alert or crash logged")
        or diag(join "\n", @lines);
}

done_testing();


# --- helpers ---------------------------------------------------------------

sub start_gateway {
    my ($port) = @_;

    eval {
        IdemGateway::start($port, "idem_redis 127.0.0.1:$redis;\n"
                                  . "    idem_key_prefix $prefix",
                           $backend, sleep => 400, log => 'info');
    };
    if ($@) {
        diag($@);
        BAIL_OUT("nginx on :$port does not start");
    }
    pass("gateway :$port starts");
}

sub fresh_id {
    my @c = ('A' .. 'Z', 'a' .. 'z', '0' .. '9', '-', '.', '_', '~', ':');
    return "t110-$$-" . join '', map { $c[int rand @c] } 1 .. 20;
}

sub content_type_is_problem {
    my ($r) = @_;
    return ($r->{h}{'content-type'} // '') =~ m{^application/problem\+json\s*(?:;|$)}i;
}

# undef when $r is an acceptable duplicate answer (409 call-in-flight or an
# identical replay), else what is wrong with it
sub duplicate_problem {
    my ($r, $id, $orig_body) = @_;
    return 'no answer within ' . $timeout . 's' unless defined $r;

    if ($r->{status} == 409) {
        my @why;
        push @why, 'Content-Type is not application/problem+json'
            unless content_type_is_problem($r);
        push @why, 'no Retry-After' unless exists $r->{h}{'retry-after'};
        push @why, 'Link is not </_idem/calls/<id>>; rel="status"'
            unless ($r->{h}{link} // '') eq qq(</_idem/calls/$id>; rel="status");
        push @why, 'body is not a call-in-flight problem'
            unless $r->{body} =~ /"type":"urn:ngx-idem:problem:call-in-flight"/;
        return @why ? join('; ', @why) . ': ' . describe($r) : undef;
    }

    if ($r->{status} == 200
        && ($r->{h}{'idempotent-replayed'} // '') eq 'true')
    {
        return undef if defined $orig_body && $r->{body} eq $orig_body;
        return 'replayed body differs from the original: ' . describe($r);
    }

    return 'neither 409 nor a replay: ' . describe($r);
}

# repeats the request while it answers "in flight" (the original's answer
# may not be stored yet); returns the first other answer
sub settled_answer {
    my ($port, $req, $id) = @_;
    my $end = time + $timeout;
    while (1) {
        my $r = send_all([$port, $req]);
        return $r unless defined $r && $r->{status} == 409
                         && !defined duplicate_problem($r, $id, undef)
                         && time < $end;
        sleep 0.05;
    }
}

# reads the status of $id until its state is no longer RECEIVED/PROCESSING
sub settled_status {
    my ($port, $id) = @_;
    my $req = "GET /_idem/calls/$id HTTP/1.0\r\nHost: localhost\r\n\r\n";
    my $end = time + $timeout;
    while (1) {
        my $r = send_all([$port, $req]);
        return $r unless defined $r && $r->{status} == 200
                         && $r->{body} =~ /"state":"(?:RECEIVED|PROCESSING)"/
                         && time < $end;
        sleep 0.05;
    }
}

sub backend_log { IdemGateway::backend_log($backend, $_[0]) }

sub backend_runs { IdemGateway::backend_runs($backend, $_[0]) }

sub describe {
    my ($r) = @_;
    return 'no answer' unless defined $r;
    my $raw = $r->{raw};
    $raw = substr($raw, 0, 2000) . '...' if length $raw > 2000;
    return "\n$raw";
}

# a long list of complaints, cut to its first few
sub first_few {
    return @_ <= 5 ? @_ : (@_[0 .. 4], '... and ' . (@_ - 5) . ' more');
}
