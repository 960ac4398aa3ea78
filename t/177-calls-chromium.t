# The calls that need a person, in a real browser (issue 47): Debian's
# chromium, driven by puppeteer-core (t/browser/calls.js; util/deps.sh
# installs it with npm ci into t/browser/node_modules, and it never
# downloads a browser), JavaScript off.  Two calls time out on a dedupe
# route; the browser opens the list, follows a call's link, resolves it
# with the page's form (applied), and sees it gone from the list; its
# resend then gets 409 call-applied.  Pages of two other origins (another
# port of the same host: Origin differs; another host name:
# Sec-Fetch-Site: cross-site) post "applied" for the other call: 403
# resolution-cross-site, and its record holds no resolution.  Headless
# chromium's screenshots of the list and of a call's page with its form
# are left in t/servroot-calls-<port>/ for people to look at.  Skipped,
# with the reason, only where chromium is not installed.
#
# Plain Test::More: a browser drives the pages, outside the Test::Nginx
# format.

use strict;
use warnings;
use Test::More;
use IO::Socket::INET;
use File::Path qw(make_path);
use JSON::PP ();
use Time::HiRes qw(sleep);

use lib 't/lib';
use IdemWait qw(wait_for);
use IdemNginx;
use IdemRecord;

my $chromium;

BEGIN {
    plan skip_all => 'TEST_NGINX_REDIS_PORT is not set (use make test)'
        unless $ENV{TEST_NGINX_REDIS_PORT} && $ENV{TEST_NGINX_BACKEND_PORT};

    ($chromium) = grep { -x } ($ENV{IDEM_CHROMIUM_BINARY} || (),
                               '/usr/bin/chromium',
                               '/usr/bin/chromium-browser');
    plan skip_all => 'no chromium: make deps (or apt-get install chromium)'
        unless $chromium;
}

my $root = IdemNginx::root();
my $puppeteer = "$root/t/browser/node_modules/puppeteer-core";

# chromium is here: the rest of the browser test must be too
ok(-d $puppeteer, 'puppeteer-core is installed (util/deps.sh: npm ci '
                  . 'in t/browser)')
    or BAIL_OUT('no puppeteer-core: run util/deps.sh');

my $redis = $ENV{TEST_NGINX_REDIS_PORT};
my $backend = $ENV{TEST_NGINX_BACKEND_PORT};
my $port = IdemNginx::base_port() + 177;
my $evil = $port + 1;
my ($one, $two) = ("br-apply-$$", "br-leave-$$");

my $ng = IdemNginx->new(name => 'calls', port => $port);
my $sr = $ng->servroot;
make_path("$sr/profile", "$sr/shots");

$ng->write_conf(<<"HTTP");
    idem_redis 127.0.0.1:$redis;
    idem_node_id gw-browser;
    idem_unknown_stream people-$$;
    server {
        listen 127.0.0.1:$port;
        location /pay {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            idem_call_id_missing reject;
            proxy_read_timeout 100ms;
            proxy_pass http://127.0.0.1:$backend/sleep/1000/1;
        }
        location /_idem/calls/ {
            idem_status resolve=on;
        }
    }
    # another site: its page's form posts to the gateway (no script)
    server {
        listen 127.0.0.1:$evil;
        location ~ ^/evil/(.+)\$ {
            default_type text/html;
            return 200 '<!DOCTYPE html><title>win a prize</title>
<form method="post" action="http://127.0.0.1:$port/_idem/calls/\$1">
<input type="hidden" name="outcome" value="applied">
<button>Claim</button></form>';
        }
    }
HTTP

$ng->start or BAIL_OUT('nginx did not start: ' . $ng->out);

sub request {
    my ($req) = @_;
    my $s = wait_for("nginx on $port",
        sub { IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port") });
    die "no nginx on $port" unless $s;
    print $s $req;
    local $/;
    my $res = <$s>;
    return $res;
}

sub pay {
    my ($id) = @_;
    return request("POST /pay HTTP/1.1\r\nHost: localhost\r\n"
                   . "X-Call-Id: $id\r\nContent-Length: 3\r\n"
                   . "Connection: close\r\n\r\na=1");
}

like(pay($two), qr{^HTTP/1.1 504 }, 'a call times out: 504');
like(pay($one), qr{^HTTP/1.1 504 }, 'another one: 504');

# both listed once their final writes (and entries) are in
my $list;
wait_for('both calls in the list', sub {
    $list = request("GET /_idem/calls/ HTTP/1.1\r\nHost: localhost\r\n"
                    . "Connection: close\r\n\r\n");
    return $list =~ /"call_id":"\Q$one\E".*"call_id":"\Q$two\E"/s;
});
like($list, qr/"call_id":"\Q$one\E","state":"UNKNOWN"/,
     'the list, as JSON: the newest first');

# screenshots, headless chromium's own (JavaScript on or off, the same
# page: it has none); a phone's width and a desktop's

my @chromium = ('timeout', '60', $chromium, qw(--headless --no-sandbox
                --disable-gpu --disable-quic --no-first-run
                --disable-background-networking --disable-component-update
                --disable-sync --disable-dev-shm-usage --hide-scrollbars),
                "--user-data-dir=$sr/profile-shots");
my $gw = "http://127.0.0.1:$port";

for my $shot (["list-phone", "$gw/_idem/calls/", '390,844'],
              ["list-wide", "$gw/_idem/calls/", '1100,700'],
              ["call-phone", "$gw/_idem/calls/$one", '390,1200'],
              ["call-wide", "$gw/_idem/calls/$one", '1100,900'])
{
    my ($name, $url, $size) = @$shot;
    system("@chromium --window-size=$size --screenshot=$sr/shots/$name.png "
           . "'$url' >>$sr/logs/chromium.log 2>&1");
    ok(-s "$sr/shots/$name.png", "a screenshot: $sr/shots/$name.png");
}

# the browser, driven

my $json = `timeout 120 node $root/t/browser/calls.js '$chromium' '$sr/profile' '$gw' 'http://127.0.0.1:$evil' 'http://localhost:$evil' '$one' '$two' 2>$sr/logs/puppeteer.log`;
my $seen = eval { JSON::PP::decode_json($json) };
ok($seen, 'the browser ran')
    or diag('puppeteer: ' . `tail -20 $sr/logs/puppeteer.log`);
$seen ||= {};

is($seen->{list_status}, 200, 'the list: 200');
is(join(' ', @{ $seen->{list_ids} || [] }), "$one $two",
   'the list: both calls, newest first');
cmp_ok($seen->{list_scroll_width} // 9999, '<=', 390,
       'the list fits a phone\'s width (no sideways scrolling)');
ok($seen->{link_found}, 'a link to the call\'s page');
is($seen->{page_url}, "$gw/_idem/calls/$one", 'followed: the call\'s page');
is($seen->{page_state}, 'UNKNOWN', 'its page: UNKNOWN');
is(join(' ', @{ $seen->{page_buttons} || [] }),
   'outcome=applied outcome=not_applied', 'its form: the two outcomes');

my @evil = @{ $seen->{evil} || [] };
is(scalar(@evil), 2, 'two other origins posted the form');
for my $i (0, 1) {
    my $e = $evil[$i] || {};
    is($e->{status}, 403, ('another port', 'another host')[$i]
                          . ': 403');
    like($e->{body} // '', qr/resolution-cross-site/,
         '... resolution-cross-site');
}

is($seen->{resolved_status}, 200, 'resolved from the page: the page again');
is(join(' ', @{ $seen->{resolved_chain} || [] }), '303',
   '... through a 303');
is($seen->{resolved_url}, "$gw/_idem/calls/$one", '... the call\'s page');
is($seen->{resolved_state}, 'SUCCESS', '... now SUCCESS');
like($seen->{resolved_text} // '',
     qr/Resolved\s+#1: applied, by ops:browser at \d{4}-\d\d-\d\d [\d:.]+ UTC, receipt pay_177/,
     '... who resolved it, when, the receipt');
ok(!$seen->{resolved_form}, '... and no form any more');
is(join(' ', @{ $seen->{list_after_ids} || [] }), $two,
   'the list: the call is gone, the other one stays');

# the resolution, as a resend sees it; the other call, as Redis holds it

like(pay($one), qr{^HTTP/1.1 409 .*"type":"urn:ngx-idem:problem:call-applied".*"receipt":"pay_177"}s,
     'a resend of the resolved call: 409 call-applied');
# its fields, whichever form the record is in (a short claim: a string)
my $fields = join "\n", keys %{ { IdemRecord::fields($redis, "idem:c:{$two}") } };
like($fields, qr/^f:/m, 'the other call\'s record is there');
unlike($fields, qr/^z:/m, '... with no resolution: the other sites changed nothing');
like(pay($two), qr{^HTTP/1.1 409 .*call-outcome-unknown}s,
     '... its resend: still 409 call-outcome-unknown');

$ng->stop;
unlike($ng->log_text, qr/\[(?:alert|crit|emerg)\]/, 'no alert in the log');

done_testing();
