# The status endpoint as a page for a person: text/html when the client's
# Accept prefers it to JSON.  Everything from the record is escaped.

use Digest::SHA ();
use Test::Nginx::Socket 'no_plan';

repeat_each(2);

no_long_string();
no_shuffle();
run_tests();

# a record as a hostile writer could leave it: markup in every field
sub hostile_record {
    my $k = 'idem:c:{tl-hostile}';
    my $t = '<i>"t&';
    my $info = qq{client <b>node</b> <s>GET</s> "><script>alert(1)</script> /x/<img src=x onerror=alert(2)>};
    my @cmd = ('hset', $k,
        "e:$t", "R 1795000000000 $info",
        "f:$t", "UNKNOWN 504 1795000000900 1795000000000 $info",
        "a:$t:1", '1795000000010 300 <u>timeout</u> 1 0 "><svg/onload=x>',
        "a:$t:2", '1795000000400 500 error_after_send 1 0 00f067aa0ba902b7 <em>no</em>');
    system('redis-cli', '-p', $ENV{TEST_NGINX_REDIS_PORT}, @cmd) == 0
        or die "redis-cli failed";
}

# calls resolved by a person (z:, as resolve.lua writes it), and one the
# service answered before a later execution was resolved
sub resolved_records {
    my $info = 'client gw-page POST 0af7651916cd43dd8448eb211c80319c /pay';
    my @recs = (
        ['rv-applied', 'f:t1', "UNKNOWN 504 1795000000900 1795000000000 $info",
         'a:t1:1', '1795000000010 800 timeout 1 0 -',
         'z:t1', 'applied 1795038401000 pay_9 ops:jane'],
        ['rv-not', 'f:t1', "UNKNOWN 504 1795000000900 1795000000000 $info",
         'a:t1:1', '1795000000010 800 deadline 1 0 -',
         'z:t1', 'not_applied 1795038402000 - -'],
        ['rv-forced', 'l:t1', '1795000001000',
         'z:t1', 'applied 1795038403000 - <b>ops</b> forced'],
        ['rv-cut', 'f:t1', "UNKNOWN 502 1795000000900 1795000000000 $info",
         'a:t1:1', '1795000000010 800 error_after_send 1 200 -',
         'z:t1', 'not_applied 1795038404000 - ops'],
        ['rv-served', 'f:t0', "SUCCESS 200 1794000000900 1794000000000 $info",
         'e:t0', "R 1794000000000 $info",
         'f:t1', "UNKNOWN 504 1795000000900 1795000000000 $info",
         'z:t1', 'not_applied 1795038405000 - ops'],
    );
    for my $r (@recs) {
        my ($id, @f) = @$r;
        system('redis-cli', '-p', $ENV{TEST_NGINX_REDIS_PORT}, 'hset',
               "idem:c:{$id}", 'v', '1', 'e:t1', "R 1795000000000 $info", @f)
            == 0 or die "redis-cli failed";
    }
}

__DATA__

=== TEST 1: an UNKNOWN call with a hostile URI, 3 attempts; its page for a browser
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_node_id gw-page;
--- config
    location /t {
        idem on;
        idem_record on;
        idem_idempotent on;
        idem_retry 3 backoff=1ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/close/9;
    }
    location /calls/ {
        idem_status;
    }
--- init
system("redis-cli -p $ENV{TEST_NGINX_REDIS_PORT} flushall >/dev/null");
--- request eval
["GET /t/<script>alert(1)</script>\"&'?q=<b>", "GET /calls/tl-1"]
--- more_headers eval
["X-Call-Id: tl-1",
 "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"]
--- error_code eval
[502, 200]
--- response_headers eval
["", "Content-Type: text/html; charset=utf-8\nVary: Accept\nContent-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; form-action 'self'\nCache-Control: no-store"]
--- response_body_like eval
["", qr{^<!DOCTYPE html>.*<title>UNKNOWN: call tl-1</title>.*<h1 class="state s-UNKNOWN">UNKNOWN</h1>\n<p class="means">It may have taken effect: ask again later, never resend it with a new id\.</p>.*<dt>Node</dt><dd><code>gw-page</code>.*<code>GET /t/&lt;script&gt;alert\(1\)&lt;/script&gt;&quot;&amp;'</code>(?:(?!<script).)*(?:<tr class="attempt">.*){3}</tbody>}s]
--- no_error_log
[alert]
[crit]



=== TEST 2: one row per attempt, each with its outcome, sent, duration and span id
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
--- request
GET /calls/tl-1
--- more_headers
Accept: text/html
--- response_body_like eval
qr{<tr class="attempt"><td></td><td>1</td><td>error_after_send</td><td>sent</td><td>-</td><td>\d+ ms</td><td><code>[0-9a-f]{16}</code></td><td class="axis"><div class="track"><div class="bar o-lost" style="left:\d+\.\d%;width:\d+\.\d%"></div></div></td></tr>\n<tr class="attempt"><td></td><td>2</td>.*<td>3</td><td>error_after_send</td>}s
--- no_error_log
[error]



=== TEST 3: a hostile record: every field escaped
--- init
main::hostile_record();
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
--- request
GET /calls/tl-hostile
--- more_headers
Accept: text/html
--- response_body_like eval
qr{&lt;b&gt;node&lt;/b&gt;.*&lt;s&gt;GET&lt;/s&gt; /x/&lt;img src=x onerror=alert\(2\)&gt;.*&lt;i&gt;&quot;t&amp;.*&lt;u&gt;timeout&lt;/u&gt;.*&quot;&gt;&lt;svg/onload=x&gt;.*\(no retry: &lt;em&gt;no&lt;/em&gt;\)}s
--- no_error_log
[error]



=== TEST 3b: ... none of its markup is the page's (a block of its own: a block's response_body_like hides its response_body_unlike; the page's own <i> and "> are not the record's)
--- request
GET /calls/tl-hostile
--- more_headers
Accept: text/html
--- response_body_unlike eval
qr{<(?:script|img|svg)\b|<b>node|<s>GET|<i>"t|<u>timeout|<em>no|"><(?:script|svg)|onerror=alert\(2\)>}
--- no_error_log
[error]



=== TEST 4: Accept: JSON without one, for */*, and where it is preferred; q-values honoured
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /calls/tl-1", "GET /calls/tl-1", "GET /calls/tl-1", "GET /calls/tl-1",
 "GET /calls/tl-1", "GET /calls/tl-1", "GET /calls/tl-1", "GET /calls/tl-1",
 "GET /calls/tl-1"]
--- more_headers eval
["", "Accept: */*", "Accept: application/json", "Accept: text/html;q=0.5, application/json",
 "Accept: text/html;q=0", "Accept: application/json;q=0.9, text/html",
 "Accept: TEXT/*", "Accept: application/*;q=0.2, text/html;q=0.3",
 "Accept: text/html ; q=1.0 , application/json ; q=1"]
--- response_headers eval
["Content-Type: application/json\nVary: Accept\n!Content-Security-Policy\nX-Content-Type-Options: nosniff",
 "Content-Type: application/json",
 "Content-Type: application/json",
 "Content-Type: application/json",
 "Content-Type: application/json",
 "Content-Type: text/html; charset=utf-8\nX-Content-Type-Options: nosniff",
 "Content-Type: text/html; charset=utf-8",
 "Content-Type: text/html; charset=utf-8",
 "Content-Type: application/json"]
--- no_error_log
[error]



=== TEST 5: the 404 NOT_FOUND page
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
--- request eval
["GET /calls/tl-none", "GET /calls/tl-none"]
--- more_headers eval
["Accept: text/html", ""]
--- error_code eval
[404, 404]
--- response_headers eval
["Content-Type: text/html; charset=utf-8",
 "Content-Type: application/json"]
--- response_body_like eval
[qr{<title>NOT_FOUND: call tl-none</title>.*<h1 class="state s-NOT_FOUND">NOT_FOUND</h1>\n<p class="means">No call with this id is recorded here}s,
 qr/^\{"state":"NOT_FOUND"\}$/]
--- no_error_log
[error]



=== TEST 6: the 503 UNKNOWN page: the store is away
--- http_config
    idem_redis 127.0.0.1:1;
--- config
    location /calls/ {
        idem_status;
    }
--- request
GET /calls/tl-away
--- more_headers
Accept: text/html
--- error_code: 503
--- response_headers
Content-Type: text/html; charset=utf-8
Retry-After: 1
--- response_body_like
<h1 class="state s-UNKNOWN">UNKNOWN</h1>\n<p class="means">The record store cannot be read now, so whether it took effect is not known: ask again later, never resend it with a new id\.</p>
--- no_error_log
[alert]



=== TEST 7: a dedupe scope: the page of the caller's own record
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope $http_x_tenant;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_dedupe_scope $http_x_tenant;
        idem_status;
    }
--- request eval
["POST /t\na=1", "GET /calls/tl-scoped", "GET /calls/tl-scoped"]
--- more_headers eval
["X-Call-Id: tl-scoped\nX-Tenant: a", "Accept: text/html\nX-Tenant: a",
 "Accept: text/html\nX-Tenant: b"]
--- error_code eval
[200, 200, 404]
--- response_body_like eval
["", qr{<h1 class="state s-SUCCESS">SUCCESS</h1>.*<tr class="attempt"><td></td><td>1</td><td>ok</td><td>sent</td><td>200</td>}s,
 qr{NOT_FOUND}]
--- no_error_log
[error]



=== TEST 8: an operator's browser without the scope: a 400 page naming what the scope is made of (JSON for an API client); a scope_digest=on location reads the call by its scope's digest, a client's location refuses a digest
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /t {
        idem on;
        idem_dedupe on;
        idem_dedupe_scope $http_x_tenant;
        idem_call_id_missing reject;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /calls/ {
        idem_dedupe_scope $http_x_tenant;
        idem_status;
    }
    location /ops/calls/ {
        idem_dedupe_scope $http_x_tenant;
        idem_status scope_digest=on;
    }
--- request eval
my $a = Digest::SHA::sha256_hex("a");
my $b = Digest::SHA::sha256_hex("b");
["POST /t\na=1", "GET /calls/tl-digest", "GET /calls/tl-digest",
 "GET /ops/calls/tl-digest?scope_digest=$a",
 "GET /ops/calls/tl-digest?x=1&scope_digest=" . uc($a),
 "GET /ops/calls/tl-digest?scope_digest=$b",
 "GET /calls/tl-digest?scope_digest=$a", "GET /ops/calls/tl-digest?scope_digest=a1",
 "GET /ops/calls/tl-digest"]
--- more_headers eval
["X-Call-Id: tl-digest\nX-Tenant: a", "Accept: text/html", "",
 "Accept: text/html", "", "", "X-Tenant: b", "", "Accept: text/html"]
--- error_code eval
[200, 400, 400, 200, 200, 404, 400, 400, 400]
--- response_headers eval
["", "Content-Type: text/html; charset=utf-8\nCache-Control: no-store\nX-Content-Type-Options: nosniff",
 "Content-Type: application/problem+json",
 "Content-Type: text/html; charset=utf-8", "Content-Type: application/json",
 "Content-Type: application/json", "Content-Type: application/problem+json",
 "Content-Type: application/problem+json", "Content-Type: text/html; charset=utf-8"]
--- response_body_like eval
["",
 qr{<h1 class="state s-other">No scope</h1>.*<p class="means">the caller's scope \(who owns call ids\) is empty: idem_dedupe_scope &quot;\$http_x_tenant&quot; has no value in this request</p>}s,
 qr{^\{"type":"urn:ngx-idem:problem:empty-dedupe-scope","title":"No scope","status":400,"detail":"the caller's scope \(who owns call ids\) is empty: idem_dedupe_scope \\"\$http_x_tenant\\" has no value in this request"\}$},
 qr{<h1 class="state s-SUCCESS">SUCCESS</h1>},
 qr{^\{"call_id":"tl-digest",.*"state":"SUCCESS"},
 qr{^\{"state":"NOT_FOUND"\}$},
 qr{"type":"urn:ngx-idem:problem:invalid-scope-digest",.*"detail":"this location reads calls under the caller's own scope: it takes no scope_digest"},
 qr{invalid-scope-digest.*64 hex digits},
 qr{has no value in this request \(or name the scope by its digest: \?scope_digest=&lt;hex SHA-256&gt;\)</p>}]
--- no_error_log
[error]



=== TEST 9: a call a person resolved: the headline says the service never answered (or how its last answer ended), that a person decided, who and when; a success the service answered still says so
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status;
    }
--- init
main::resolved_records();
--- request eval
["GET /calls/rv-applied", "GET /calls/rv-not", "GET /calls/rv-forced",
 "GET /calls/rv-cut", "GET /calls/rv-served", "GET /calls/rv-applied"]
--- more_headers eval
["Accept: text/html", "Accept: text/html", "Accept: text/html",
 "Accept: text/html", "Accept: text/html", ""]
--- response_body_like eval
['^(?!.*answered with a success).*<title>SUCCESS: call rv-applied</title>.*<h1 class="state s-SUCCESS">SUCCESS</h1>\n<p class="means">It took effect, in a person\'s word: the service never answered it \(its last attempt timed out waiting for an answer; the caller got 504\)\. <code>ops:jane</code> decided so at 2026-11-18 21:46:41\.000 UTC\.</p>',
 '<h1 class="state s-FAILED">FAILED</h1>\n<p class="means">It did not take effect, in a person\'s word: the service never answered it \(its last attempt was cut off by the deadline, no answer; the caller got 504\)\. Someone \(no name given\) decided so at 2026-11-18 21:46:42\.000 UTC\. A resend runs it again\.</p>',
 '<h1 class="state s-SUCCESS">SUCCESS</h1>\n<p class="means">It took effect, in a person\'s word: its gateway never said how it ended\. <code>&lt;b&gt;ops&lt;/b&gt;</code> decided so at 2026-11-18 21:46:43\.000 UTC, forced \(that gateway taken to be gone\)\.</p>',
 '<h1 class="state s-FAILED">FAILED</h1>\n<p class="means">It did not take effect, in a person\'s word: the service\'s last answer \(200\) never came whole \(its last attempt lost its connection after sending, no answer; the caller got 502\)\. <code>ops</code> decided so at 2026-11-18 21:46:44\.000 UTC\. A resend runs it again\.</p>',
 '<h1 class="state s-SUCCESS">SUCCESS</h1>\n<p class="means">It took effect: the service answered with a success\.</p>',
 '^\{"call_id":"rv-applied",.*"state":"SUCCESS",.*"resolved":\{"execution":1,"outcome":"applied","at_ms":1795038401000,"receipt":"pay_9","by":"ops:jane"\}']
--- no_error_log
[error]
