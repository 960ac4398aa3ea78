# The timeline page as a person sees it: rendered by headless Chromium
# (Debian's chromium), whose DOM must hold one row per attempt; a
# screenshot is left in t/servroot-chromium-<port>/timeline.png for people
# to look at (beside t/servroot, so that the files after this one leave
# it there).  A hostile record and a hostile id, rendered, leave no
# element of their own in the DOM.  Skipped, with the reason, where
# chromium is not installed (make deps installs it).
#
# Plain Test::More: the page is read by a browser, outside the Test::Nginx
# format.

use strict;
use warnings;
use Test::More;
use IO::Socket::INET;
use File::Path qw(make_path);
use Time::HiRes qw(sleep);

use lib 't/lib';
use IdemWait qw(wait_for);
use IdemNginx;

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

my $redis = $ENV{TEST_NGINX_REDIS_PORT};
my $backend = $ENV{TEST_NGINX_BACKEND_PORT};
my $port = ($ENV{TEST_NGINX_SERVER_PORT} || 1984) + 176;
my $id = "tl-chromium-$$";

my $ng = IdemNginx->new(name => 'chromium', port => $port);
my $sr = $ng->servroot;
make_path("$sr/profile");

$ng->write_conf(<<"HTTP");
    idem_redis 127.0.0.1:$redis;
    idem_node_id gw-chromium;
    server {
        listen 127.0.0.1:$port;
        location /t {
            idem on;
            idem_record on;
            idem_idempotent on;
            idem_retry 3 backoff=20ms;
            proxy_read_timeout 100ms;
            proxy_pass http://127.0.0.1:$backend/sleep/300/9;
        }
        location /calls/ {
            idem_status;
        }
    }
HTTP

$ng->start or BAIL_OUT('nginx did not start: ' . $ng->out);

sub request {
    my ($req) = @_;
    my $s;
    for (1 .. 50) {
        $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port");
        last if $s;
        sleep 0.05;
    }
    die "no nginx on $port" unless $s;
    print $s $req;
    local $/;
    my $res = <$s>;
    return $res;
}

my $res = request("POST /t/order/<b>1</b> HTTP/1.1\r\nHost: localhost\r\n"
                  . "X-Call-Id: $id\r\nContent-Length: 3\r\n"
                  . "Connection: close\r\n\r\na=1");
like($res, qr{^HTTP/1.1 504 }, 'three attempts timed out: 504');

# what a browser is sent for this id, once the call's final write is in
# (the log phase sends it after the answer: a status read until then says
# the call is in flight)
wait_for('the final write', sub {
    $res = request("GET /calls/$id HTTP/1.1\r\nHost: localhost\r\n"
                   . "Accept: text/html\r\nConnection: close\r\n\r\n");
    return $res =~ m{<h1 class="state s-UNKNOWN">};
});
like($res, qr{Content-Type: text/html}, 'the page is HTML');

# a browser that hangs fails the test instead of the suite
my @chromium = ('timeout', '60', $chromium, qw(--headless --no-sandbox --disable-gpu
                --disable-quic --no-first-run --disable-background-networking
                --disable-component-update --disable-sync
                --disable-dev-shm-usage --hide-scrollbars),
                "--user-data-dir=$sr/profile");
my $url = "http://127.0.0.1:$port/calls/$id";

# chromium asks for text/html first: it gets the page, as a person would

my $dom = `@chromium --dump-dom '$url' 2>$sr/logs/chromium.log`;

ok($dom =~ /<h1 class="state s-UNKNOWN">UNKNOWN<\/h1>/,
   'the state, in large type')
    or diag("chromium: " . `tail -5 $sr/logs/chromium.log`);
like($dom, qr/never resend it with a new id/, 'what it means');
my @rows = $dom =~ /<tr class="attempt">/g;
is(scalar(@rows), 3, 'one row per attempt');
my @bars = $dom =~ /<div class="bar o-lost" style="left:[\d.]+%;width:[\d.]+%"/g;
is(scalar(@bars), 3, 'three bars on the time axis: sent, no answer');
unlike($dom, qr/<b>1<\/b>/, 'the URI is text, not markup');
like($dom, qr{/t/order/&lt;b&gt;1&lt;/b&gt;}, 'the URI, escaped');
unlike($dom, qr/<script/i, 'no script');

system("@chromium --window-size=1100,700 --screenshot=$sr/timeline.png "
       . "'$url' >>$sr/logs/chromium.log 2>&1");
ok(-s "$sr/timeline.png", "a screenshot: $sr/timeline.png");

# a record as a hostile writer could leave it: markup in every field
# (t/175 checks the bytes; here a browser parses them)

my $hk = "idem:c:{tl-hostile-$$}";
my $t = '<i>"t&';
my $info = qq{client <b>node</b> <s>GET</s> "><script>document.title='pwned'</script> /x/<img src=x onerror=alert(2)>};
system('redis-cli', '-p', $redis, 'hset', $hk,
       "e:$t", "R 1795000000000 $info",
       "f:$t", "UNKNOWN 504 1795000000900 1795000000000 $info",
       "a:$t:1", '1795000000010 300 <u>timeout</u> 1 0 "><svg/onload=x>',
       "a:$t:2", '1795000000400 500 error_after_send 1 0 00f067aa0ba902b7 <em>no</em>')
    == 0 or die "redis-cli failed";
system("redis-cli -p $redis pexpire '$hk' 60000 >/dev/null");

# the elements a page of this module has; anything else came from a record
my %own = map { $_ => 1 } qw(html head meta title style body p h1 h2 dl dt
                             dd code div span table thead tbody tr th td);

sub foreign {
    my ($dom) = @_;
    # the legend's swatches are the page's own <i>s
    $dom =~ s{<i class="bar o-[a-z]+(?: ns)?"></i>}{}g;
    my %seen = map { lc($_) => 1 } $dom =~ /<([a-zA-Z][a-zA-Z0-9]*)/g;
    return join ' ', sort grep { !$own{$_} } keys %seen;
}

$dom = `@chromium --dump-dom 'http://127.0.0.1:$port/calls/tl-hostile-$$' 2>>$sr/logs/chromium.log`;
like($dom, qr/<h1 class="state s-UNKNOWN">UNKNOWN<\/h1>/,
     'a hostile record: its page');
is(foreign($dom), '', 'no element from the record in the DOM');
like($dom, qr{&lt;script&gt;document\.title='pwned'&lt;/script&gt;},
     'the markup shown as text');
unlike($dom, qr/<title>pwned/, 'no script ran');
is(scalar(() = $dom =~ /<tr class="attempt">/g), 2, 'its two attempts');

# an id no client may send: the status endpoint's 400 problem, as text

$dom = `@chromium --dump-dom 'http://127.0.0.1:$port/calls/%3Cimg%20src=x%20onerror=alert(1)%3E' 2>>$sr/logs/chromium.log`;
like($dom, qr/invalid-call-id/, 'a hostile id: 400 invalid-call-id');
is(foreign($dom), 'pre', 'no element but the text viewer\'s');

done_testing();
