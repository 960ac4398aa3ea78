# gRPC end to end, with a real gRPC client and service (Debian's
# python3-grpcio, t/data/grpc_peer.py) on either side of the gateway:
# ids in metadata, the budget shrinking the client's deadline, the status
# code the client library reports for each module answer, a replay the
# library accepts, UNAVAILABLE retried on an idempotent route.
#
# Plain Test::More: a gRPC client is outside the Test::Nginx format.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(sleep);
use JSON::PP;
use POSIX ();
use File::Temp ();

use lib 't/lib';
use IdemWait qw(wait_for);
use IdemNginx;

my $root = IdemNginx::root();
my $python = '/usr/bin/python3';   # Debian's, with python3-grpcio
my $redis = $ENV{TEST_NGINX_REDIS_PORT}
    or plan skip_all => 'TEST_NGINX_REDIS_PORT is not set (use make test)';
system("$python -c 'import grpc' 2>/dev/null") == 0
    or plan skip_all => 'python3-grpcio is not installed (make deps)';

my $base = $ENV{TEST_NGINX_SERVER_PORT} || 1984;
my $gw = $base + 165;
my $svc = $base + 166;
my $peer = "$root/t/data/grpc_peer.py";
my $prefix = "grpc:$$:";
my $ng = IdemNginx->new(name => 'grpc', port => $gw,
                        worker_connections => 1024);

my ($svc_pid, $svc_out, $started);   # $svc_out open: closing it waits

END {
    local $?;
    $ng->stop_hard if $started;
    if ($svc_pid) {
        kill 'TERM', $svc_pid;
        waitpid $svc_pid, 0;
    }
    system("redis-cli -p $redis --scan --pattern '$prefix*' "
           . "| xargs -r redis-cli -p $redis del >/dev/null 2>&1")
        if $started;
}

# the file whose existence ends a held call of the service (grpc_peer.py)
$ENV{GRPC_PEER_RELEASE} = File::Temp::tempdir(CLEANUP => 1) . '/release';

start_service();
start_gateway();

sub call {
    my ($method, @args) = @_;
    open my $fh, '-|', $python, $peer, 'call', $gw, $method, @args
        or die "grpc_peer: $!";
    my $out = join '', <$fh>;
    close $fh;
    my $r = eval { decode_json((split /\n/, $out)[-1]) };
    diag("grpc_peer: $out") unless $r;
    return $r || {};
}

sub answer_md {    # the metadata the service saw, from an Echo answer
    my ($r) = @_;
    my %md = ($r->{answer} // '') =~ /^([^=\n]+)=(.*)$/mg;
    return \%md;
}

# ids in metadata: the client's call id reaches the service and comes back

my $r = call('Echo', 'md:x-call-id=gc-1');
is($r->{code}, 'OK', 'Echo: OK');
my $md = answer_md($r);
is($md->{'x-call-id'}, 'gc-1', 'the service sees the client call id');
is($md->{'x-call-id-source'}, 'client', '... as the client\'s');
is($md->{'x-call-attempt'}, '1', '... on attempt 1');
like($md->{'x-trace-id'}, qr/^[0-9a-f]{32}$/, '... with a trace id');
is($r->{initial}{'x-call-id'}, 'gc-1', 'the client gets its call id back');

# a generated id for a call without one

$r = call('Echo');
$md = answer_md($r);
like($md->{'x-call-id'}, qr/^[0-9a-f-]{36}$/, 'a missing id is generated');
is($r->{initial}{'x-call-id'}, $md->{'x-call-id'},
   '... and handed back in the metadata');

# the budget: the route's 5 s shrunk by the client's 2 s deadline

$r = call('Echo', 'md:x-call-id=gc-2', 'timeout=2');
$md = answer_md($r);
my $left = $md->{'time-remaining-ms'} // 0;
# (the client library rounds the grpc-timeout it sends up a little)
ok($left > 1000 && $left <= 2100, "the service's deadline is the client's "
   . "2 s, not the route's 5 s ($left ms left)");
ok($md->{'x-deadline-ms'} > 1000 && $md->{'x-deadline-ms'} <= 2100,
   "... and so is X-Deadline-Ms ($md->{'x-deadline-ms'})");

# the module's own answers, as the client library reports them

$r = call('Echo', 'md:x-call-id=bad id');
is($r->{code}, 'INVALID_ARGUMENT', 'an invalid call id: INVALID_ARGUMENT');
like($r->{details} // '', qr/Invalid call id/, '... with a readable message');

$r = call('Echo', 'md:x-call-id=gc-3', 'md:x-deadline-ms=0');
is($r->{code}, 'DEADLINE_EXCEEDED', 'a spent budget: DEADLINE_EXCEEDED');

$r = call('Slow', 'md:x-call-id=gc-4', 'md:x-deadline-ms=300');
is($r->{code}, 'DEADLINE_EXCEEDED',
   'a budget that ends mid-call: DEADLINE_EXCEEDED, not UNAVAILABLE');

# dedupe: a replay the library accepts, a mismatch, a claim in flight

$r = call('Echo', 'md:x-call-id=gc-5', 'message=pay');
is($r->{code}, 'OK', 'dedupe: the first call runs');
my $first = $r->{answer};
$r = call('Echo', 'md:x-call-id=gc-5', 'message=pay');
is($r->{code}, 'OK', 'dedupe: the duplicate is OK for the client library');
is($r->{answer}, $first, '... with the first answer\'s message');
is($r->{initial}{'idempotent-replayed'}, 'true', '... marked as a replay');
is(call('Count', 'message=gc-5')->{answer}, '1',
   'the service ran the call once');

$r = call('Echo', 'md:x-call-id=gc-5', 'message=refund');
is($r->{code}, 'FAILED_PRECONDITION',
   'the same id with another message: FAILED_PRECONDITION');

# the first call is held by the service until the duplicate has its
# answer, and the duplicate is sent once the first one's claim is in Redis
# (a client is a python3 process, slow to start on a loaded machine)
my $pid = fork;
if ($pid == 0) {
    call('Slow', 'md:x-call-id=gc-6', 'message=hold');
    POSIX::_exit(0);            # not exit: END would stop the gateway
}
ok(wait_for('the first call claimed',
            sub { `redis-cli -p $redis exists '${prefix}c:{gc-6}'` == 1 }),
   'the first call is in flight');
$r = call('Slow', 'md:x-call-id=gc-6', 'message=hold');
is($r->{code}, 'ABORTED', 'a duplicate while the first runs: ABORTED');
open my $release, '>', $ENV{GRPC_PEER_RELEASE} or die "release: $!";
close $release;
waitpid $pid, 0;

# retries: UNAVAILABLE is retried on the idempotent route, with the same id

$r = call('Flaky', 'md:x-call-id=gc-7');
is($r->{code}, 'OK', 'idempotent route: UNAVAILABLE, then OK');
$md = answer_md($r);
is($md->{'x-call-attempt'}, '2', '... on the second attempt');
is($md->{'x-call-id'}, 'gc-7', '... with the same call id');

$r = call('Internal', 'md:x-call-id=gc-8');
is($r->{code}, 'INTERNAL', 'the service\'s own status passes');

# records follow grpc-status

my $st = `curl -s --http2-prior-knowledge http://127.0.0.1:$gw/calls/gc-8`;
like($st, qr/"state":"FAILED"/, 'INTERNAL is recorded FAILED');
$st = `curl -s --http2-prior-knowledge http://127.0.0.1:$gw/calls/gc-1`;
like($st, qr/"state":"SUCCESS"/, 'OK is recorded SUCCESS');

my $log = $ng->log_text;
unlike($log, qr/\[(?:alert|crit|emerg)\]|exited on signal/,
       'no alert or crash in the error log');

done_testing();


sub start_service {
    $svc_pid = open($svc_out, '-|', $python, $peer, 'serve', $svc)
        or BAIL_OUT("cannot start the gRPC service: $!");
    my $ready = <$svc_out>;
    BAIL_OUT('the gRPC service does not start')
        unless defined $ready && $ready =~ /ready/;
}

sub start_gateway {
    $ng->write_conf(<<"HTTP");
    idem_redis 127.0.0.1:$redis;
    idem_key_prefix $prefix;

    server {
        listen 127.0.0.1:$gw http2;

        idem on;
        idem_deadline 5s;
        idem_record on;

        location /idem.Test/Echo {
            idem_dedupe on;
            idem_dedupe_scope off;
            grpc_pass grpc://127.0.0.1:$svc;
        }
        location /idem.Test/Slow {
            idem_dedupe on;
            idem_dedupe_scope off;
            grpc_pass grpc://127.0.0.1:$svc;
        }
        location /idem.Test/Flaky {
            idem_idempotent on;
            idem_retry 3 backoff=10ms;
            grpc_pass grpc://127.0.0.1:$svc;
        }
        location /idem.Test/ {
            grpc_pass grpc://127.0.0.1:$svc;
        }
        location /calls/ {
            idem_status;
        }
    }
HTTP

    $started = $ng->start;
    BAIL_OUT('nginx does not start: ' . $ng->out) unless $started;
}

