# A rolling upgrade: the previous release (0.6.0, built from this
# repository's history by util/build-release.sh) and this one serve the
# same call ids on one Redis, with the same routes, as they do while
# gateways are upgraded one at a time (docs/install.md, "Upgrading").
# Packages of 0.6.0 were built from several commits (debian/changelog
# read 0.6.0 until 5764a76): two of them run here, the first package's
# (1db18b0, "0.6.0" below) and the last one before resolutions (72fcf72,
# the parent of 0726471), which has the trim (idem_record_max_executions),
# short records, leases as this version writes them and "v" = 1:
#
#  1. 0.6 refuses idem_dedupe_wait (nginx -t): it has no waiting
#     duplicates; 1db18b0 refuses idem_record_max_executions (no trim);
#  2. records: one written by either version is read by the other's status
#     endpoint, also when both wrote executions of the id; a record of
#     this version states its format ("v" = 1), one of 0.6 has none; a
#     short record (idem_record_short on, the default) is what 0.6 cannot
#     read nor add to: the documented reason to hold it back; 72fcf72
#     writes "v" = 1 and short records itself, reads this version's and
#     adds to them;
#  3. an answer stored by one is replayed by the other, both ways;
#  4. an id in flight on one gateway: 409 on the other, both ways, and
#     the other's status endpoint shows it in progress (call-in-flight,
#     but 1db18b0 reads this version's lease as lapsed);
#  5. the id with another body: 422 on the other, both ways;
#  6. a duplicate that waits (idem_dedupe_wait) on this version for an
#     owner on 0.6 gets the owner's answer;
#  (3-6 with each of the two 0.6.0 builds)
#  7. resolutions (idem_status resolve=on), held back until every gateway
#     runs this version: the known outcome while a 0.6 gateway serves the
#     id (it reads the resolved call UNKNOWN and answers 409
#     call-outcome-unknown, never runs it again); a resolution of a
#     record 0.6 made states the format it added ("v" = 1); a 0.6 write
#     to a resolved record leaves the resolution in place;
#  8. but the trim of 72fcf72 (a record past idem_record_max_executions)
#     loses it: the resolved execution is folded into the summary as
#     UNKNOWN and its "z:" left orphaned; every gateway then reads the
#     record UNKNOWN without the resolution, a resend gets 409
#     call-outcome-unknown on 72fcf72 and what the resolution said on
#     this version (409 call-applied, or released and run again), also
#     after a trim of its own, which keeps the claim's "z:".
#  9. a forced resolution (issue 45): a claim as a 0.6 gateway leaves it
#     when it dies (no bound "b:"), lapsed, is refused as too early
#     through this version until forced; both 0.6.0 builds ignore the
#     forced resolution as any other (UNKNOWN, 409 call-outcome-unknown,
#     not run), this version answers as it says (409 call-applied, or
#     released: run once).
#
# And 0.7.0 as packaged (5764a76, claims of plain commands: HSETNX of
# "o", then the rest) beside this version with its defaults, whose dedupe
# claims are short records (SET ... NX GET, t/101): 0.7.0's HSETNX takes
# one through its upgrade script; 3-5 both ways (a duplicate here waits),
# and a waiter here for an owner on 0.7.0.
#
# The backend counts each call id's executions (/log/ID): none ran twice.
#
# Plain Test::More: six nginx instances (0.6.0 of 1db18b0; this version
# as the upgrade guide sets it, idem_record_short off; this version with
# its defaults and a waiting route; 0.6.0 of 72fcf72 with its defaults
# and idem_record_max_executions 2; this version with idem_record_short
# off and the same cap; 0.7.0 with its defaults) run by
# t/lib/IdemNginx.pm; the clients
# and the backend's counter are t/lib/IdemGateway.pm's, the records read
# with t/lib/IdemRecord.pm.  Skipped, with a message, where the
# repository has no history to build the 0.6.0 builds from.

use strict;
use warnings;
use Test::More;
use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw(sleep time);
use Digest::SHA ();
use lib 't/lib';
use IdemNginx;
use IdemGateway qw(send_all post get);
use IdemRecord;

my $redis = $ENV{TEST_NGINX_REDIS_PORT}
    or plan skip_all => 'TEST_NGINX_REDIS_PORT is not set (use make test)';
my $backend = $ENV{TEST_NGINX_BACKEND_PORT}
    or plan skip_all => 'TEST_NGINX_BACKEND_PORT is not set (use make test)';

# the releases are built against Debian's nginx, as their packages were
# (an upgrade of the package is what runs two of them side by side): with
# another nginx (make test NGINX=...), their modules would not load
{
    my ($want, $have) = map { my $v = `$_ -v 2>&1`; chomp $v; $v }
                        '/usr/sbin/nginx', IdemNginx::binary();
    plan skip_all => "the previous releases are built for Debian's nginx "
                     . "($want), not for this one ($have)"
        if $want ne $have;
}

# the previous release: the commit of its first package (debian/changelog)
my ($release, $commit) = ('0.6.0', '1db18b0');
# and the last commit whose debian/changelog still read 0.6.0 before
# resolutions came (0726471): packages of 0.6.0 were built from it too
my ($pre_release, $pre_commit) = ('0.6-pre-resolutions', '72fcf72');
# and 0.7.0 (debian/changelog from 5764a76): claims of plain commands
# (HSETNX of "o", then the rest), before claims were scripts and before
# short claims
my ($rel_release, $rel_commit) = ('0.7.0', '5764a76');

my $root = IdemNginx::root();
my ($old_so, $pre_so, $rel_so) = map {
    my $so = `$root/util/build-release.sh $_->[0] $_->[1]`;
    my $rc = $? >> 8;
    plan skip_all => "release $_->[1] cannot be built here (not a git "
                     . 'checkout with its history)' if $rc == 2;
    BAIL_OUT("util/build-release.sh $_->[0] $_->[1] failed") if $rc != 0;
    chomp $so;
    $so;
} [$commit, $release], [$pre_commit, $pre_release],
  [$rel_commit, $rel_release];

my $base = IdemNginx::base_port();
# not base + 200: where the backend listens in the usual port sets (B,
# B + 200, B + 1000)
my ($old, $new, $new2, $pre, $new3, $rel) = map { $base + $_ } 180 .. 185;
my $prefix = "ru:$$:";            # the Redis keys of this run only
my $timeout = 10;                 # seconds, every wait
my $n = 0;

END {
    local $?;
    system("redis-cli -p $redis --scan --pattern '$prefix*' "
           . "| xargs -r redis-cli -p $redis del >/dev/null 2>&1")
        if $redis && defined $prefix;
}


# 1. 0.6 has no waiting duplicates

{
    my $ng = IdemNginx->new(name => 'ru-check', port => $old);
    with_module($old_so, sub {
        $ng->write_conf(conf($old, 'old', wait => '5s'));
    });
    my $cmd = IdemNginx::binary() . ' -t -p ' . $ng->servroot . '/ -c '
              . $ng->conf_file;
    my $out = `$cmd 2>&1`;
    like($out, qr/unknown directive "idem_dedupe_wait"/,
         "$release refuses idem_dedupe_wait: nginx -t fails");

    # which 0.6.0 build runs: only those with the trim know
    # idem_record_max_executions (docs/install.md)
    with_module($old_so, sub { $ng->write_conf(conf($old, 'pre')) });
    $out = `$cmd 2>&1`;
    like($out, qr/unknown directive "idem_record_max_executions"/,
         "$release ($commit) refuses idem_record_max_executions: no trim");
}

my $v06 = "$release ($commit)";     # in the tests' names
my %name = ($old => $v06, $new => 'this version',
            $new2 => 'this version (defaults)',
            $pre => "0.6.0 ($pre_commit)",
            $new3 => 'this version (a cap of 2)',
            $rel => "$rel_release ($rel_commit)");
my %gw = (
    $old => start_gw('ru-old', $old, $old_so, 'old'),
    $new => start_gw('ru-new', $new, undef, 'new'),
    $new2 => start_gw('ru-new2', $new2, undef, 'new2', wait => '10s'),
    # idem_record_max_executions 2: its trim runs at a record's third
    # execution
    $pre => start_gw('ru-pre', $pre, $pre_so, 'pre'),
    # this version as 'new', with the same cap
    $new3 => start_gw('ru-new3', $new3, undef, 'new3'),
    # 0.7.0 with its defaults (short records on), no waiting route
    $rel => start_gw('ru-rel', $rel, $rel_so, 'rel'),
);


# 2. records

{
    my $id = fresh_id();
    is(code(send_all([$new, get('/t', $id)])), 200, 'a call through this '
       . 'version (records only)');
    my %f = wait_fields($id, 'f:');
    is(IdemRecord::type($redis, key($id)), 'hash', 'with idem_record_short '
       . 'off its record is a hash');
    is($f{v}, '1', 'its record states its format: v = 1');
    my $st = settled_status($old, $id);
    like($st && $st->{body}, qr/"state":"SUCCESS".*"executions":1[,}]/,
         "$v06 reads it: SUCCESS, one execution");
}

{
    my $id = fresh_id();
    is(code(send_all([$old, get('/t', $id)])), 200, "a call through $v06");
    my %f = wait_fields($id, 'f:');
    ok(!exists $f{v}, "$v06\'s record has no v (its format, 0)");
    my $st = settled_status($new, $id);
    like($st && $st->{body}, qr/"state":"SUCCESS".*"executions":1[,}]/,
         "this version reads it: SUCCESS, one execution");
}

{
    my $id = fresh_id();
    for my $gw ($old, $new, $old) {
        my $execs = 1 + grep { /^f:/ } keys %{ { IdemRecord::fields($redis,
                                                             key($id)) } };
        is(code(send_all([$gw, get('/t', $id)])), 200, "the id again, "
           . "through $name{$gw}");
        wait_fields($id, ('f:') x $execs);
    }
    for my $gw ($old, $new) {
        my $st = settled_status($gw, $id);
        like($st && $st->{body}, qr/"state":"SUCCESS".*"executions":3[,}]/,
             "$name{$gw} reads the three executions of both versions");
    }
}

{
    my $id = fresh_id();
    is(code(send_all([$new2, get('/t', $id)])), 200, 'a call through this '
       . 'version with idem_record_short on (the default)');
    my %f = wait_fields($id, 'f:');
    is(IdemRecord::type($redis, key($id)), 'string', 'its record is short');
    is($f{v}, '1', 'a short record states its format too');

    # the known outcome, and the reason for idem_record_short off
    my $st = send_all([$old, get("/_idem/calls/$id")]);
    is(code($st), 503, "$v06 cannot read a short record: 503");

    my $pos = $gw{$old}->log_pos;
    is(code(send_all([$old, get('/t', $id)])), 200, "the id through "
       . "$v06");
    ok($gw{$old}->wait_log(qr/WRONGTYPE/, $pos, $timeout),
       "$v06\'s write to the short record fails (WRONGTYPE), logged");
    $st = settled_status($new, $id);
    like($st && $st->{body}, qr/"executions":1[,}]/,
         "its execution is not in the record");
}

# the later 0.6.0 build: its records are of format 1 already, short ones
# by default, and it reads and adds to this version's short records

{
    my $id = fresh_id();
    is(code(send_all([$pre, get('/t', $id)])), 200, "a call through "
       . "$name{$pre}");
    my %f = wait_fields($id, 'f:');
    is(IdemRecord::type($redis, key($id)), 'string', 'its record is short '
       . '(idem_record_short on, its default)');
    is($f{v}, '1', 'it states format 1: v = 1');
    my $st = settled_status($new, $id);
    like($st && $st->{body}, qr/"state":"SUCCESS".*"executions":1[,}]/,
         'this version reads it: SUCCESS, one execution');
}

{
    my $id = fresh_id();
    is(code(send_all([$new2, get('/t', $id)])), 200, 'a short record '
       . 'written by this version');
    wait_fields($id, 'f:');
    is(IdemRecord::type($redis, key($id)), 'string', 'it is short');
    my $st = settled_status($pre, $id);
    like($st && $st->{body}, qr/"state":"SUCCESS".*"executions":1[,}]/,
         "$name{$pre} reads it");
    is(code(send_all([$pre, get('/t', $id)])), 200, "the id through "
       . "$name{$pre}");
    wait_fields($id, ('f:') x 2);
    $st = settled_status($new, $id);
    like($st && $st->{body}, qr/"state":"SUCCESS".*"executions":2[,}]/,
         'its execution is added: this version reads two');
}


# 3. an answer stored by one version, replayed by the other

my %done;           # "<gateway that ran it> <the other>": id, body
# 0.7.0 beside this version with its defaults: this version's claims
# are short records (SET ... NX GET), which 0.7.0's claim (HSETNX) takes
# through its upgrade script, and its owner's writes add to them
my @pairs = ((map { ([$_, $new], [$new, $_]) } $old, $pre),
             [$rel, $new2], [$new2, $rel]);

for my $pair (@pairs) {
    my ($one, $two) = @$pair;
    my $id = fresh_id();
    my $body = qq({"order":"$id"});

    my $orig = send_all([$one, post($id, $body, '/q')]);
    ok(is_original($orig), "$name{$one} runs the call");
    wait_fields($id, 'k:');

    my $dup = send_all([$two, post($id, $body, '/q')]);
    ok(is_replay($dup, $orig), "$name{$two} replays the answer "
       . "$name{$one} stored")
        or diag(describe($dup));
    is(runs($id), 1, 'the backend ran it once');
    $done{"$one $two"} = [$id, $body];
}


# 4. in flight on one version: 409 on the other

for my $pair (@pairs) {
    my ($one, $two) = @$pair;

    # this version with its defaults waits for the owner (6. below)
    next if $two == $new2;

    my $id = fresh_id();
    my $body = qq({"slow":"$id"});

    my $owner = start_req($one, post($id, $body, '/d'));
    wait_fields($id, 'd', 'o', 'l:');

    my $dup = send_all([$two, post($id, $body, '/d')]);
    is(code($dup), 409, "$name{$two} answers 409 while $name{$one} runs it")
        or diag(describe($dup));

    # every build reads the other's lease: this version's claim writes it
    # by Redis's clock, as its claim script always did (docs/install.md)
    my $type = 'call-in-flight';
    like($dup && $dup->{body}, qr/problem:$type"/, "its type: $type");
    like(status_body($two, $id), qr/"state":"(?:RECEIVED|PROCESSING)"/,
         "$name{$two}'s status endpoint shows it in progress");

    my $orig = finish($owner);
    ok(is_original($orig), "$name{$one}\'s answer");
    # the answer is stored by the final write, after the client has it
    wait_fields($id, 'k:');
    my $again = send_all([$two, post($id, $body, '/d')]);
    ok(is_replay($again, $orig), "$name{$two} then replays it")
        or diag(describe($again));
    is(runs($id), 1, 'the backend ran it once');
}


# 5. another body under the id: 422 on the other version

for my $pair (@pairs) {
    my ($one, $two) = @$pair;
    my ($id, $body) = @{ $done{"$one $two"} };
    my $res = send_all([$two, post($id, qq({"order":"other"}), '/q')]);
    is(code($res), 422, "$name{$two}: 422 for another body under "
       . "$name{$one}\'s id");
    like($res && $res->{body}, qr/problem:payload-mismatch"/,
         'payload-mismatch');
    is(runs($id), 1, 'the backend still ran it once');
}


# 6. a duplicate that waits on this version for an owner on 0.6 or 0.7.0

for my $pair (map { [$_, $new2] } $old, $pre, $rel) {
    my ($o, $w) = @$pair;
    my $id = fresh_id();
    my $body = qq({"wait":"$id"});

    my $owner = start_req($o, post($id, $body, '/d'));
    wait_fields($id, 'd', 'o', 'l:');

    my $waiter = start_req($w, post($id, $body, '/d'));
    my $orig = finish($owner);
    my $got = finish($waiter);
    ok(is_original($orig), "the owner on $name{$o} answers");
    ok(is_replay($got, $orig), "the waiter on $name{$w} gets its "
       . 'answer replayed') or diag(describe($got));
    is(runs($id), 1, 'the backend ran it once');
    my %f = wait_fields($id, 'k:');
    is(scalar(grep { /^k:/ && $f{$_} eq 'R' } keys %f), 1,
       'the record keeps the answer');
}


# 7. resolutions: held back until every gateway runs this version; what
#    a 0.6 gateway makes of them meanwhile

{
    my $id = fresh_id();
    is(code(send_all([$new, post($id, 'x', '/u')])), 504, 'a call that '
       . 'times out after it was sent (UNKNOWN)');
    wait_fields($id, 'k:');
    my $res = resolve($new, $id, 'applied');
    like($res && $res->{body}, qr/"state":"SUCCESS".*"resolved":\{/,
         'resolved applied through this version');

    like(status_body($new, $id), qr/"state":"SUCCESS"/,
         'this version reads SUCCESS');
    like(status_body($old, $id), qr/"state":"UNKNOWN"/,
         "$v06 ignores the resolution: UNKNOWN (the known outcome)");

    like(body(send_all([$new, post($id, 'x', '/u')])),
         qr/problem:call-applied"/, 'a resend through this version: 409 '
         . 'call-applied');
    like(body(send_all([$old, post($id, 'x', '/u')])),
         qr/problem:call-outcome-unknown"/, "through $v06: 409 "
         . 'call-outcome-unknown, not run again');
    is(runs($id), 1, 'the backend ran it once');

    # a 0.6 write to the resolved record (another execution of the id)
    is(code(send_all([$old, get('/t', $id)])), 200, "$v06 records "
       . 'another execution of the id');
    my %f = wait_fields($id, 'f:', 'f:');
    is(scalar(grep { /^z:/ } keys %f), 1, 'the resolution is still there');
    like(status_body($new, $id), qr/"resolved":\{"execution":1,/,
         'this version still shows it');
}

{
    my $id = fresh_id();
    is(code(send_all([$new, post($id, 'x', '/u')])), 504, 'another call '
       . 'ends UNKNOWN');
    wait_fields($id, 'k:');
    like(body(resolve($new, $id, 'not_applied')), qr/"state":"FAILED"/,
         'resolved not applied through this version');

    like(body(send_all([$old, post($id, 'x', '/u')])),
         qr/problem:call-outcome-unknown"/, "a resend through $v06: "
         . '409 call-outcome-unknown (not released there)');
    is(runs($id), 1, 'not run again');
    is(code(send_all([$new, post($id, 'x', '/u')])), 200, 'through this '
       . 'version: released, it runs');
    is(runs($id), 2, 'the backend ran it a second time, as resolved');
}

{
    my $id = fresh_id();
    is(code(send_all([$old, post($id, 'x', '/u')])), 504, "a call through "
       . "$v06 ends UNKNOWN");
    my %f = wait_fields($id, 'k:');
    ok(!exists $f{v}, "its record has no v ($v06\'s format)");
    like(body(resolve($new, $id, 'applied')), qr/"state":"SUCCESS"/,
         'resolved through this version');
    %f = IdemRecord::fields($redis, key($id));
    is($f{v}, '1', 'the resolution states the format it added: v = 1');
    like(status_body($old, $id), qr/"state":"UNKNOWN"/,
         "$v06 still reads the record (UNKNOWN)");
    is(runs($id), 1, 'the backend ran it once');
}


# 8. a resolution and the trim of a 0.6.0 build that has one
#    (idem_record_max_executions) but no resolutions (72fcf72): a call
#    ends UNKNOWN on this version, is resolved here, and the later 0.6.0
#    build then writes two more executions of the id (its /tf: records
#    only, the backend answers 409, so FAILED), the record's third: its
#    trim keeps the newest two and folds the resolved one into the
#    summary "x" as UNKNOWN (its script does not know "z:"), deleting
#    its fields but the claim's (k:, l:) and "z:", left without its
#    execution.  The known outcome (docs/install.md): every gateway reads
#    the record UNKNOWN, with no resolution; a resend gets 409
#    call-outcome-unknown on 0.6.0, and on this version what the
#    resolution said (its claim script reads the "z:" of the claim's
#    execution, which is still there, and which a trim of this version
#    keeps: fails without it); nothing ran twice that the resolution did
#    not release.

for my $outcome ('applied', 'not_applied') {
    my $id = fresh_id();
    is(code(send_all([$new, post($id, 'x', '/u')])), 504, "$outcome: a "
       . 'call ends UNKNOWN on this version');
    my %f = wait_fields($id, 'k:');
    my $o = $f{o};
    my $state = $outcome eq 'applied' ? 'SUCCESS' : 'FAILED';
    like(body(resolve($new, $id, $outcome)), qr/"state":"$state"/,
         "resolved $outcome through this version: $state");
    like(status_body($pre, $id), qr/"state":"UNKNOWN"/,
         "$name{$pre} ignores the resolution: UNKNOWN");

    is(code(send_all([$pre, get('/tf', $id)])), 409, "$name{$pre} "
       . 'records another execution of the id (FAILED)');
    wait_fields($id, ('f:') x 2);
    like(status_body($new, $id), qr/"state":"$state".*"resolved":\{/,
         "below the cap, this version still reads it $state, resolved");
    is(code(send_all([$pre, get('/tf', $id)])), 409, 'and another, the '
       . "record's third: past idem_record_max_executions 2");
    %f = wait_fields($id, 'x');
    like($f{x} // '', qr/^1 0 1 /, "its trim folded the resolved "
         . 'execution into the summary as UNKNOWN (x: 1 dropped, 0 '
         . 'succeeded, 1 unknown)') or diag("x = " . ($f{x} // 'none'));
    ok(!exists $f{"e:$o"} && !exists $f{"f:$o"}, 'its fields are gone');
    ok(exists $f{"z:$o"}, 'its resolution is left, without its execution '
       . '(orphaned)');
    ok(exists $f{"k:$o"} && exists $f{"l:$o"}, 'its claim stays (k:, l:)');

    for my $gw ($new, $pre) {
        my $st = settled_status($gw, $id);
        like($st && $st->{body}, qr/"state":"UNKNOWN".*"executions":3[,}]/,
             "$name{$gw} reads the record UNKNOWN, three executions (the "
             . 'resolution lost)');
        unlike($st && $st->{body}, qr/"resolved"/, '"resolved" is gone');
    }

    like(body(send_all([$pre, post($id, 'x', '/u')])),
         qr/problem:call-outcome-unknown"/, "a resend through $name{$pre}: "
         . '409 call-outcome-unknown');
    is(posts($id), 1, 'not run again');

    # a trim by this version (same cap) keeps the claim's z:, orphaned
    # or not (t/065)
    is(code(send_all([$new3, get('/tf', $id)])), 409, 'this version '
       . 'records another execution of the id: its own trim runs');
    my $end = time + $timeout;
    sleep 0.05 until (field($id, 'x') // '') =~ /^2 / || time > $end;
    like(field($id, 'x'), qr/^2 0 1 /, 'its summary counts one more '
         . 'dropped (FAILED), still one UNKNOWN');
    ok(defined field($id, "z:$o"), 'the orphaned resolution is kept (the '
       . "claim's)");

    if ($outcome eq 'applied') {
        like(body(send_all([$new, post($id, 'x', '/u')])),
             qr/problem:call-applied"/, 'through this version: 409 '
             . 'call-applied (the claim reads the orphaned z:)');
        is(posts($id), 1, 'the backend ran the call once');
    } else {
        is(code(send_all([$new, post($id, 'x', '/u')])), 200, 'through '
           . 'this version: released by the orphaned z:, it runs');
        is(posts($id), 2, 'the backend ran it a second time, as resolved');
    }
}


# 9. a forced resolution of a claim left by a 0.6 gateway that died: its
#    o, digest, lapsed lease and arrival, no bound (0.6.0 writes none),
#    no final write to come

for my $outcome ('applied', 'not_applied') {
    my $id = fresh_id();
    my $body = qq({"forced":"$id"});
    my ($sec, $usec) = split /\n/, `redis-cli -p $redis time`;
    my $now = $sec * 1000 + int($usec / 1000);
    system('redis-cli', '-p', $redis, 'hset', key($id), 'o', 'tokf',
           'd', Digest::SHA::sha256_hex("POST /q\n$body"),
           'l:tokf', $now - 1000,
           'e:tokf', 'P ' . ($now - 5000) . ' client old POST '
                     . '4bf92f3577b34da6a3ce929d0e0e4736 /q') == 0
        or fail('the claim of a dead 0.6 gateway written');

    like(body(resolve($new, $id, $outcome)), qr/resolution-too-early/,
         "$outcome, not forced: too early (nothing bounds a 0.6 claim)");
    my $res = resolve($new, $id, $outcome, 1);
    is(code($res), 200, "$outcome, forced through this version: taken");
    like(body($res), qr/"resolved":\{[^}]*"by":"t200","forced":true\}/,
         'said to be forced');
    like(field($id, 'z:tokf'), qr/^$outcome \d+ - t200 forced$/,
         'its field: a fifth word, forced');

    for my $gw ($old, $pre) {
        like(status_body($gw, $id), qr/^(?!.*"resolved").*"state":"UNKNOWN"/,
             "$name{$gw} ignores it, as any resolution: UNKNOWN");
        like(body(send_all([$gw, post($id, $body, '/q')])),
             qr/problem:call-outcome-unknown"/, "a resend through "
             . "$name{$gw}: 409 call-outcome-unknown");
    }
    is(runs($id), 0, 'not run there');

    if ($outcome eq 'applied') {
        like(body(send_all([$new, post($id, $body, '/q')])),
             qr/problem:call-applied"/, 'through this version: 409 '
             . 'call-applied');
        is(runs($id), 0, 'never run');
    } else {
        is(code(send_all([$new, post($id, $body, '/q')])), 200, 'through '
           . 'this version: released, it runs');
        is(runs($id), 1, 'the backend ran it once');
    }
}


# every gateway stops cleanly; nothing went wrong but what was asked for

for my $port (sort keys %gw) {
    ok($gw{$port}->stop(20), "$name{$port} stops");
    my @lines = $gw{$port}->bad_lines(
        with_error => 1,
        allow => qr/upstream timed out|WRONGTYPE/);
    is(scalar @lines, 0, "$name{$port}: no error, alert or crash logged")
        or diag(join "\n", @lines[0 .. ($#lines < 9 ? $#lines : 9)]);
}

done_testing();


# --- helpers ---------------------------------------------------------------

# the same routes on every gateway; this version adds a resolving status
# location, and idem_record_short off as the upgrade guide says ('new'),
# or keeps its defaults ('new2')
sub conf {
    my ($port, $kind, %o) = @_;
    my $wait = $o{wait} ? "idem_dedupe_wait $o{wait};" : '';
    # 'new2': a call is over before its arrival is written, so that its
    # one write makes a short record
    my $short = $kind eq 'new' ? 'idem_record_short off;'
              : $kind eq 'new3' ? 'idem_record_short off; '
                                  . 'idem_record_max_executions 2;'
              : $kind eq 'new2' ? 'idem_record_arrival_delay 5s;'
              : $kind eq 'pre' ? 'idem_record_max_executions 2; '
                                . 'idem_record_arrival_delay 5s;' : '';
    my $resolve = $kind =~ /^(?:old|pre|rel)$/ ? '' : <<'LOC';
        location /_idem/resolve/ {
            idem_status resolve=on;
        }
LOC

    return <<"HTTP";
    idem_redis 127.0.0.1:$redis;
    idem_key_prefix $prefix;
    idem_node_id $kind;
    $short
    server {
        listen 127.0.0.1:$port;
        location /d {
            idem on;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            $wait
            proxy_pass http://127.0.0.1:$backend/sleep/3000/1;
        }
        location /q {
            idem on;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            proxy_pass http://127.0.0.1:$backend/ok;
        }
        location /u {
            idem on;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            proxy_read_timeout 300ms;
            proxy_pass http://127.0.0.1:$backend/sleep/3000/1;
        }
        location /t {
            idem on;
            idem_record on;
            proxy_pass http://127.0.0.1:$backend/ok;
        }
        location /tf {
            idem on;
            idem_record on;
            proxy_pass http://127.0.0.1:$backend/status/409/1000;
        }
        location /_idem/calls/ {
            idem_status;
        }
$resolve    }
HTTP
}

# runs $code with $so in place of this version's module (undef: as it is)
sub with_module {
    my ($so, $code) = @_;
    local $ENV{TEST_NGINX_LOAD_MODULES} = $ENV{TEST_NGINX_LOAD_MODULES};
    if (defined $so) {
        $ENV{TEST_NGINX_LOAD_MODULES} = join ' ', map {
            m{/ngx_http_idem_module\.so$} ? $so : $_
        } split ' ', $ENV{TEST_NGINX_LOAD_MODULES} || '';
    }
    $code->();
}

sub start_gw {
    my ($name, $port, $so, $kind, %o) = @_;
    my $ng = IdemNginx->new(name => $name, port => $port, log_level => 'info');
    with_module($so, sub { $ng->write_conf(conf($port, $kind, %o)) });
    $ng->start or BAIL_OUT("nginx ($kind) on :$port does not start: "
                           . $ng->out);
    return $ng;
}

sub fresh_id { sprintf 'ru-%d-%d-%06d', $$, ++$n, int rand 1e6 }

sub key { "${prefix}c:{$_[0]}" }

# the record's fields once it holds each of @want (a name, or a prefix
# ending in ':' counted as often as it is given), waiting at most $timeout
sub wait_fields {
    my ($id, @want) = @_;
    my %f;
    my $end = time + $timeout;
    while (1) {
        %f = IdemRecord::fields($redis, key($id));
        my %need;
        $need{$_}++ for @want;
        my $ok = 1;
        for my $w (keys %need) {
            my $have = $w =~ /:$/ ? grep { /^\Q$w\E/ } keys %f
                                  : exists $f{$w} ? 1 : 0;
            $ok = 0 if $have < $need{$w};
        }
        return %f if $ok;
        if (time > $end) {
            fail("record of $id holds @want");
            diag(join "\n", map { "$_ = $f{$_}" } sort keys %f);
            return %f;
        }
        sleep 0.02;
    }
}

sub code { defined $_[0] ? $_[0]{status} : 'no answer' }

sub body { defined $_[0] ? $_[0]{body} : '' }

sub is_original {
    my ($r) = @_;
    return defined $r && $r->{status} == 200
           && !exists $r->{h}{'idempotent-replayed'};
}

sub is_replay {
    my ($r, $orig) = @_;
    return defined $r && defined $orig && $r->{status} == 200
           && ($r->{h}{'idempotent-replayed'} // '') eq 'true'
           && $r->{body} eq $orig->{body};
}

# a request written now, its answer read by finish()
sub start_req {
    my ($port, $req) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Timeout => $timeout)
        or return undef;
    syswrite($s, $req);
    return $s;
}

sub finish {
    my ($s) = @_;
    return undef unless $s;
    my $sel = IO::Select->new($s);
    my $buf = '';
    my $end = time + $timeout + 5;
    while (time < $end && $sel->can_read($end - time)) {
        my $got = sysread($s, $buf, 65536, length $buf);
        last unless $got;
    }
    close $s;
    return IdemGateway::parse($buf);
}

sub status_body { body(send_all([$_[0], get("/_idem/calls/$_[1]")])) }

# the status until its state is no longer RECEIVED or PROCESSING
sub settled_status {
    my ($port, $id) = @_;
    my $end = time + $timeout;
    while (1) {
        my $r = send_all([$port, get("/_idem/calls/$id")]);
        return $r unless defined $r && $r->{status} == 200
                         && $r->{body} =~ /"state":"(?:RECEIVED|PROCESSING)"/
                         && time < $end;
        sleep 0.05;
    }
}

sub resolve {
    my ($port, $id, $outcome, $force) = @_;
    my $json = qq({"outcome":"$outcome","by":"t200")
               . ($force ? ',"force":true}' : '}');
    return send_all([$port, "POST /_idem/resolve/$id HTTP/1.0\r\n"
                            . "Host: localhost\r\nContent-Length: "
                            . length($json) . "\r\n\r\n$json"]);
}

sub runs { IdemGateway::backend_runs($backend, $_[0]) }

# one field of the record (undef: none)
sub field { my %f = IdemRecord::fields($redis, key($_[0])); $f{$_[1]} }

# the backend's POSTs of an id (the calls of /u), its GETs left out
sub posts {
    scalar grep { /method=POST/ }
        split /\n/, IdemGateway::backend_log($backend, $_[0]);
}

sub describe {
    my ($r) = @_;
    return 'no answer' unless defined $r;
    return substr($r->{raw}, 0, 1500);
}
