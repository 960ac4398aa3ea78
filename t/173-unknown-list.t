# The calls that need a person: an idem_status location asked for without
# an id (GET /_idem/calls/) lists the executions still UNKNOWN and not
# resolved, from the follow-up stream its location names
# (idem_unknown_stream), newest first: JSON when asked for, else a page.
# Paging by ?limit= (50, at most 200) and ?before=; only the calls the
# location reads by id; an entry whose record no longer says UNKNOWN for
# that execution is left out.  Some blocks seed the stream and records
# by hand (main::seed): the record's fields as the module writes them.

use lib 't/lib';
use IdemWait ();
use Digest::SHA ();
use JSON::PP ();
use Test::Nginx::Socket 'no_plan';

# No repeat_each(2): each block seeds its own stream and calls.

sub redis {
    my @args = @_;
    system('redis-cli', '-p', $ENV{TEST_NGINX_REDIS_PORT}, @args) == 0
        or die "redis-cli @args failed";
}

# an UNKNOWN execution (token, created ms) of a call, and its stream entry
# (entry id), as a timeout leaves them; %o: other fields and keys
sub seed {
    my ($id, $entry, %o) = @_;
    my $token = $o{token} // sprintf('%016x', int(rand(2**32)) + 1);
    my $created = $o{created} // 1795000000000;
    my $key = $o{key} // "idem:c:{$id}";
    my $uri = $o{uri} // '/pay';
    my $info = "client gw-seed POST 0af7651916cd43dd8448eb211c80319c $uri";
    unless ($o{norecord}) {
        redis('hset', $key, 'v', '1', "e:$token", "R $created $info",
              "f:$token", 'UNKNOWN 504 ' . ($created + 900) . " $created $info",
              "a:$token:1", ($created + 1) . ' 800 timeout 1 0 00f067aa0ba902b7',
              @{ $o{fields} || [] });
        redis('pexpire', $key, 600000);
    }
    redis('xadd', $o{stream} // 'idem:people', $entry,
          call_id => $id, trace_id => '0af7651916cd43dd8448eb211c80319c',
          key => $key, token => $token, method => 'POST', uri => $uri,
          node => 'gw-seed', attempts => 1, last_outcome => 'timeout',
          last_sent => 1, final_status => 504, created_ms => $created,
          ended_ms => $created + 900, @{ $o{entry} || [] });
    return $token;
}

sub flush {
    redis('flushall');
}

no_long_string();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: JSON: a call that timed out is listed with its fields; one that succeeded is not
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_node_id gw-list;
    idem_unknown_stream people;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 100ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /ok {
        idem on;
        idem_record on;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/ok;
    }
    location /_idem/calls/ {
        idem_status resolve=on;
    }
--- init
main::flush();
--- request eval
["POST /pay?card=1\nx=1", "GET /ok", "GET /_idem/calls/"]
--- more_headers eval
["X-Call-Id: ul-1\nX-Trace-Id: 4bf92f3577b34da6a3ce929d0e0e4736",
 "X-Call-Id: ul-ok", "Accept: application/json"]
--- error_code eval
[504, 200, 200]
--- response_headers_like eval
["", "", "Content-Type: application/json"]
--- response_body_like eval
["", "",
 '^\{"calls":\[\{"call_id":"ul-1","state":"UNKNOWN","age_ms":\d+,"created_ms":1\d{12},"ended_ms":1\d{12},"method":"POST","uri":"/pay","node":"gw-list","attempts":1,"last_outcome":"timeout","last_sent":true,"final_status":504,"receipt":null,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","scope_digest":null,"entry":"\d+-\d+","link":"/_idem/calls/ul-1"\}\],"next":null\}\n$']
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: a page for a browser: the call, a link to its page, readable at phone width, no script; the call's page links back to the list
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_node_id gw-list;
    idem_unknown_stream people;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 100ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /_idem/calls/ {
        idem_status;
    }
--- init
main::flush();
--- request eval
["POST /pay\nx=1", "GET /_idem/calls/", "GET /_idem/calls/ul-2"]
--- more_headers eval
["X-Call-Id: ul-2", "Accept: text/html,application/xhtml+xml,*/*;q=0.8",
 "Accept: text/html"]
--- error_code eval
[504, 200, 200]
--- response_headers_like eval
["", "Content-Type: text/html; charset=utf-8\nVary: Accept\nCache-Control: no-store\nContent-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; form-action 'self'", ""]
--- response_body_like eval
["", qr{^(?!.*<script)(?!.*width:\d+px)(?!.*Older calls)<!DOCTYPE html>.*<meta name="viewport" content="width=device-width">.*<h1>Calls that need a person</h1>.*1 on this page.*<li class="call"><div class="top"><a class="id" href="/_idem/calls/ul-2"><code>ul-2</code></a><span class="age">\d+ s ago</span></div>\n<p class="req"><code>POST /pay</code></p>\n<p class="meta"><span>node <code>gw-list</code></span><span class="attempts">1 attempt: timed out waiting for an answer</span><span>answered 504</span></p></li>\n</ol>\n</body>}s,
 qr{<h1 class="state s-UNKNOWN">UNKNOWN</h1>\n<p class="means">[^<]*</p>\n<p class="nav"><a href="\./">&larr; Calls that need a person</a></p>\n<dl>}]
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3: paging: newest first, ?limit= and ?before= walk the stream; "next" is null on the last page
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream people;
--- config
    location /_idem/calls/ {
        idem_status;
    }
--- init
main::flush();
main::seed("pg-$_", "${_}000-1") for 1 .. 5;
--- request eval
["GET /_idem/calls/?limit=2", "GET /_idem/calls/?limit=2&before=4000-1",
 "GET /_idem/calls/?before=2000-1&limit=2", "GET /_idem/calls/",
 "GET /_idem/calls/?before=3000-1", "GET /_idem/calls/?limit=2"]
--- more_headers eval
["", "", "", "", "", "Accept: text/html"]
--- response_body_like eval
['^\{"calls":\[\{"call_id":"pg-5",[^{]*"entry":"5000-1",[^{]*\},\{"call_id":"pg-4",[^{]*"entry":"4000-1",[^{]*\}\],"next":"4000-1"\}$',
 '^\{"calls":\[\{"call_id":"pg-3",[^{]*\},\{"call_id":"pg-2",[^{]*\}\],"next":"2000-1"\}$',
 '^\{"calls":\[\{"call_id":"pg-1",[^{]*\}\],"next":null\}$',
 '^\{"calls":\[\{"call_id":"pg-5".*"call_id":"pg-1",[^{]*\}\],"next":null\}$',
 '^\{"calls":\[\{"call_id":"pg-2",[^{]*\},\{"call_id":"pg-1",[^{]*\}\],"next":null\}$',
 '<a rel="next" href="\?before=4000-1&amp;limit=2">Older calls</a>']
--- no_error_log
[error]



=== TEST 4: bounded: ?limit= above 200 reads 200 entries; a limit or before that is not one: 400 invalid-page
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream people;
--- config
    location /_idem/calls/ {
        idem_status;
    }
--- init
main::flush();
main::redis('eval', q{
for i = 1, 205 do
  local t = string.format('%016x', i)
  local k = 'idem:c:{bd-' .. i .. '}'
  local info = 'client gw POST 0af7651916cd43dd8448eb211c80319c /pay'
  redis.call('HSET', k, 'e:' .. t, 'R 1795000000000 ' .. info,
             'f:' .. t, 'UNKNOWN 504 1795000000900 1795000000000 ' .. info)
  redis.call('XADD', 'idem:people', i .. '-1', 'call_id', 'bd-' .. i,
             'key', k, 'token', t, 'method', 'POST', 'uri', '/pay',
             'node', 'gw', 'attempts', '1', 'last_outcome', 'timeout',
             'last_sent', '1', 'final_status', '504',
             'created_ms', '1795000000000', 'ended_ms', '1795000000900')
end
return 1}, 0);
--- request eval
["GET /_idem/calls/?limit=100000", "GET /_idem/calls/?limit=99999999999999999999999",
 "GET /_idem/calls/", "GET /_idem/calls/?limit=0", "GET /_idem/calls/?limit=ten",
 "GET /_idem/calls/?limit=", "GET /_idem/calls/?before=x-1",
 "GET /_idem/calls/?before=1-2-3", "GET /_idem/calls/?before=-1"]
--- error_code eval
[200, 200, 200, 400, 400, 400, 400, 400, 400]
--- response_body_like eval
['^\{"calls":\[\{"call_id":"bd-205",(?:[^{]*\},\{){199}"call_id":"bd-6",[^{]*\}\],"next":"6-1"\}$',
 '"next":"6-1"\}$',
 '^\{"calls":\[\{"call_id":"bd-205",(?:[^{]*\},\{){49}"call_id":"bd-156",[^{]*\}\],"next":"156-1"\}$',
 '"type":"urn:ngx-idem:problem:invalid-page",.*"detail":"limit must be a number from 1"',
 '"type":"urn:ngx-idem:problem:invalid-page"',
 '"type":"urn:ngx-idem:problem:invalid-page"',
 '"detail":"before must be a stream entry\'s id',
 '"type":"urn:ngx-idem:problem:invalid-page"',
 '"type":"urn:ngx-idem:problem:invalid-page"']
--- no_error_log
[error]



=== TEST 5: what a client sent is escaped: a URI with <, &, quotes on the page and in JSON; an entry whose id no client may send is left out
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream people;
--- config
    location /_idem/calls/ {
        idem_status;
    }
--- init
main::flush();
main::seed('esc-1', '1000-1', uri => q{/p/<b>x</b>&a="q'"});
main::seed('<img src=x>', '2000-1', key => 'idem:c:{<img src=x>}');
main::seed('esc-2', '3000-1', entry => [node => '<i>n</i>', attempts => '2<b>',
                                        final_status => '504"']);
--- request eval
["GET /_idem/calls/", "GET /_idem/calls/"]
--- more_headers eval
["Accept: text/html", ""]
--- response_body_like eval
[qr{^(?!.*<b>)(?!.*<img)(?!.*<i>).*node <code>&lt;i&gt;n&lt;/i&gt;</code>.*\? attempts.*answered 504&quot;.*<code>POST /p/&lt;b&gt;x&lt;/b&gt;&amp;a=&quot;q'&quot;</code>}s,
 qr{^(?!.*img src)\{"calls":\[\{"call_id":"esc-2",[^\[]*"node":"<i>n</i>","attempts":null,[^\[]*"final_status":null,[^\[]*\},\{"call_id":"esc-1",[^\[]*"uri":"/p/<b>x</b>&a=\\"q'\\"",[^\[]*\}\],"next":null\}$}]
--- no_error_log
[error]



=== TEST 6: left out: a call resolved, a call sent again since (its newest execution not the entry's), one whose record expired, an entry for a call listed already
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream people;
--- config
    location /_idem/calls/ {
        idem_status;
    }
--- init
main::flush();
main::seed('lo-keep', '1000-1');
main::seed('lo-resolved', '2000-1',
           fields => ['z:0000000000000001', 'applied 1795000001000 - ops'],
           token => '0000000000000001');
main::seed('lo-again', '3000-1', token => '0000000000000002',
           fields => ['e:0000000000000003', 'R 1795000002000 client gw POST 0af7651916cd43dd8448eb211c80319c /pay',
                      'f:0000000000000003', 'SUCCESS 200 1795000002100 1795000002000 client gw POST 0af7651916cd43dd8448eb211c80319c /pay']);
main::seed('lo-gone', '4000-1', norecord => 1);
main::seed('lo-twice', '5000-1', token => '0000000000000004');
main::seed('lo-twice', '6000-1', token => '0000000000000005',
           fields => ['e:0000000000000004', 'R 1794000000000 client gw POST 0af7651916cd43dd8448eb211c80319c /pay']);
--- request
GET /_idem/calls/
--- response_body_like: ^\{"calls":\[\{"call_id":"lo-twice",[^{]*"entry":"6000-1",[^{]*\},\{"call_id":"lo-keep",[^{]*\}\],"next":null\}$
--- no_error_log
[error]



=== TEST 7: resolved through the API, a call leaves the list; the list never changes a call (GET with ?outcome=)
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream people;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 100ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /_idem/calls/ {
        idem_status resolve=on;
    }
--- init
main::flush();
--- request eval
["POST /pay\nx=1", "GET /_idem/calls/?outcome=applied",
 "GET /_idem/calls/ul-7?outcome=applied", "GET /_idem/calls/",
 "POST /_idem/calls/ul-7\n{\"outcome\":\"applied\",\"by\":\"ops\"}",
 "GET /_idem/calls/"]
--- more_headers eval
["X-Call-Id: ul-7", "", "", "", "", ""]
--- error_code eval
[504, 200, 200, 200, 200, 200]
--- response_body_like eval
["", '^\{"calls":\[\{"call_id":"ul-7",', '"state":"UNKNOWN",', '^\{"calls":\[\{"call_id":"ul-7",',
 '"state":"SUCCESS",.*"resolved":\{', '^\{"calls":\[\],"next":null\}$']
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 8: scoped calls: an operators' location (scope_digest=on) lists every scope's, by digest, and the unscoped ones (by scope_digest=none: it has a scope of its own), with links that read them; a client's lists its own scope's only, and none without one
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream people;
--- config
    location /_idem/ops/calls/ {
        idem_dedupe_scope $http_authorization;
        idem_status scope_digest=on;
    }
    location /v1/calls/ {
        idem_dedupe_scope $http_authorization;
        idem_status;
    }
--- init
main::flush();
my $a = Digest::SHA::sha256_hex('Bearer a');
my $b = Digest::SHA::sha256_hex('Bearer b');
main::seed('sc-a', '1000-1', key => "idem:s:{$a:sc-a}");
main::seed('sc-b', '2000-1', key => "idem:s:{$b:sc-b}");
main::seed('sc-none', '3000-1');
--- request eval
["GET /_idem/ops/calls/", "GET /_idem/ops/calls/",
 "GET /_idem/ops/calls/sc-a?scope_digest=" . Digest::SHA::sha256_hex('Bearer a'),
 "GET /v1/calls/", "GET /v1/calls/", "GET /v1/calls/"]
--- more_headers eval
["", "Accept: text/html", "", "Authorization: Bearer a", "Authorization: Bearer b", ""]
--- error_code eval
[200, 200, 200, 200, 200, 400]
--- response_body_like eval
['^\{"calls":\[\{"call_id":"sc-none",[^{]*"scope_digest":null,[^{]*"link":"/_idem/ops/calls/sc-none\?scope_digest=none"\},\{"call_id":"sc-b",[^{]*"scope_digest":"' . Digest::SHA::sha256_hex('Bearer b') . '",[^{]*"link":"/_idem/ops/calls/sc-b\?scope_digest=' . Digest::SHA::sha256_hex('Bearer b') . '"\},\{"call_id":"sc-a",[^{]*"link":"/_idem/ops/calls/sc-a\?scope_digest=' . Digest::SHA::sha256_hex('Bearer a') . '"\}\],"next":null\}$',
 '<a class="id" href="/_idem/ops/calls/sc-b\?scope_digest=' . Digest::SHA::sha256_hex('Bearer b') . '"><code>sc-b</code></a>.*scope <code class="scope">' . substr(Digest::SHA::sha256_hex('Bearer b'), 0, 16) . '&hellip;</code>',
 '^\{"call_id":"sc-a",.*"state":"UNKNOWN"',
 '^\{"calls":\[\{"call_id":"sc-a",[^{]*"scope_digest":null,[^{]*"link":"/v1/calls/sc-a"\}\],"next":null\}$',
 '^\{"calls":\[\{"call_id":"sc-b",[^{]*\}\],"next":null\}$',
 '"type":"urn:ngx-idem:problem:empty-dedupe-scope"']
--- no_error_log
[error]



=== TEST 9: a location without idem_unknown_stream (or with it off) lists nothing: 404 no-unknown-stream; a POST without an id is still 400
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /calls/ {
        idem_status resolve=on;
    }
    location /off/ {
        idem_unknown_stream off;
        idem_status;
    }
--- request eval
["GET /calls/", "GET /off/", "POST /calls/\n{\"outcome\":\"applied\"}"]
--- error_code eval
[404, 404, 400]
--- response_headers_like eval
["Content-Type: application/problem\\+json", "", ""]
--- response_body_like eval
['"type":"urn:ngx-idem:problem:no-unknown-stream",.*"detail":"this location names no idem_unknown_stream: it lists no calls; ask for a call by its id"',
 '"type":"urn:ngx-idem:problem:no-unknown-stream"',
 '"type":"urn:ngx-idem:problem:invalid-call-id"']
--- no_error_log
[error]



=== TEST 10: the store away: 503 {"state":"UNKNOWN"} with Retry-After, never an empty list
--- http_config
    idem_redis 127.0.0.1:1 timeout=200ms connect_timeout=100ms;
    idem_unknown_stream people;
--- config
    location /_idem/calls/ {
        idem_status;
    }
--- request
GET /_idem/calls/
--- error_code: 503
--- response_headers
Retry-After: 1
--- response_body
{"state":"UNKNOWN"}
--- no_error_log
[alert]



=== TEST 11: links stay on this host: the list asked for as //evil.example/..%2F_idem/calls/ (nginx normalises it to this location) links each call by the normalised path, on the page and in JSON
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream people;
--- config
    location /_idem/calls/ {
        idem_status resolve=on;
    }
--- init
main::flush();
main::seed('ev-1', '1000-1');
--- request eval
["GET //evil.example/..%2F_idem/calls/", "GET //evil.example/..%2F_idem/calls/",
 "GET /_idem/%63alls/"]
--- more_headers eval
["Accept: application/json", "Accept: text/html", ""]
--- error_code eval
[200, 200, 200]
--- response_body_like eval
['^(?!.*evil)\{"calls":\[\{"call_id":"ev-1",[^{]*"link":"/_idem/calls/ev-1"\}\],"next":null\}$',
 qr{^(?!.*evil)(?!.*href="//).*<a class="id" href="/_idem/calls/ev-1"><code>ev-1</code></a>}s,
 '"link":"/_idem/calls/ev-1"']
--- no_error_log
[error]



=== TEST 12: ... with merge_slashes off, a path that starts with // is linked with one slash; what the path holds that a link may not is escaped
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream people;
    merge_slashes off;
--- config
    location ~ /$ {
        idem_status;
    }
--- init
main::flush();
main::seed('ev-2', '1000-1');
--- request eval
["GET //evil.example/", "GET //evil.example/", "GET /a%22b%3Cc%3E%5Cd%20e/"]
--- more_headers eval
["Accept: application/json", "Accept: text/html", ""]
--- error_code eval
[200, 200, 200]
--- response_body_like eval
['"link":"/evil.example/ev-2"\}',
 qr{^(?!.*href="//).*<a class="id" href="/evil.example/ev-2">}s,
 '"link":"/a%22b%3Cc%3E%5Cd%20e/ev-2"\}']
--- no_error_log
[error]



=== TEST 13: one list for every call that needs a person: an operators' location (scope_digest=on) lists the unscoped calls beside the scoped ones, also where it inherits a scope (their links then say scope_digest=none, which reads and resolves them); a client's location refuses scope_digest=none
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream people;
--- config
    idem_dedupe_scope $http_authorization;
    location /_idem/calls/ {
        idem_status resolve=on scope_digest=on;
    }
    location /_idem/plain/ {
        idem_dedupe_scope off;
        idem_status scope_digest=on;
    }
    location /v1/calls/ {
        idem_status;
    }
--- init
main::flush();
my $a = Digest::SHA::sha256_hex('Bearer a');
main::seed('one-a', '1000-1', key => "idem:s:{$a:one-a}");
main::seed('one-u', '2000-1');
--- request eval
my $a = Digest::SHA::sha256_hex('Bearer a');
["GET /_idem/calls/", "GET /_idem/calls/", "GET /_idem/calls/one-u?scope_digest=none",
 "GET /_idem/calls/one-u?scope_digest=NONE", "GET /_idem/calls/one-u",
 "GET /_idem/plain/", "GET /_idem/plain/one-u",
 "GET /v1/calls/one-u?scope_digest=none",
 "POST /_idem/calls/one-u?scope_digest=none\noutcome=applied&by=ops",
 "GET /_idem/calls/one-u?scope_digest=none", "GET /_idem/calls/"]
--- more_headers eval
["", "Accept: text/html", "", "", "", "", "", "Authorization: Bearer a",
 "Content-Type: application/x-www-form-urlencoded", "Accept: text/html", ""]
--- error_code eval
[200, 200, 200, 200, 400, 200, 200, 400, 303, 200, 200]
--- response_headers_like eval
["", "", "", "", "", "", "", "", "Location: http://localhost(:\\d+)?/_idem/calls/one-u\\?scope_digest=none", "", ""]
--- response_body_like eval
my $a = Digest::SHA::sha256_hex('Bearer a');
['^\{"calls":\[\{"call_id":"one-u",[^{]*"scope_digest":null,[^{]*"link":"/_idem/calls/one-u\?scope_digest=none"\},\{"call_id":"one-a",[^{]*"scope_digest":"' . $a . '",[^{]*"link":"/_idem/calls/one-a\?scope_digest=' . $a . '"\}\],"next":null\}$',
 qr{2 on this page.*<a class="id" href="/_idem/calls/one-u\?scope_digest=none"><code>one-u</code></a>(?:(?!scope <code).)*</li>.*<a class="id" href="/_idem/calls/one-a\?scope_digest=$a">.*scope <code class="scope">}s,
 '^\{"call_id":"one-u",.*"state":"UNKNOWN"',
 '^\{"call_id":"one-u",.*"state":"UNKNOWN"',
 '"type":"urn:ngx-idem:problem:empty-dedupe-scope"',
 '^\{"calls":\[\{"call_id":"one-u",[^{]*"scope_digest":null,[^{]*"link":"/_idem/plain/one-u"\},\{"call_id":"one-a",[^{]*"link":"/_idem/plain/one-a\?scope_digest=' . $a . '"\}\],"next":null\}$',
 '^\{"call_id":"one-u",.*"state":"UNKNOWN"',
 '"type":"urn:ngx-idem:problem:invalid-scope-digest"',
 "^Resolved: see the call's page.\n\$",
 '<h1 class="state s-SUCCESS">SUCCESS</h1>.*<dt>Resolved</dt><dd>#1: applied, by <code>ops</code>',
 '^\{"calls":\[\{"call_id":"one-a",[^{]*\}\],"next":null\}$']
--- no_error_log
[error]



=== TEST 14: the store away, for a browser: a 503 page that says the list cannot be read now (JSON for any other client, TEST 10)
--- http_config
    idem_redis 127.0.0.1:1 timeout=200ms connect_timeout=100ms;
    idem_unknown_stream people;
--- config
    location /_idem/calls/ {
        idem_status;
    }
--- request
GET /_idem/calls/
--- more_headers
Accept: text/html,application/xhtml+xml,*/*;q=0.8
--- error_code: 503
--- response_headers
Content-Type: text/html; charset=utf-8
Retry-After: 1
Cache-Control: no-store
Vary: Accept
Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; form-action 'self'
--- response_body_like eval
qr{^(?!.*<script)<!DOCTYPE html>.*<meta name="viewport" content="width=device-width">.*<h1>Calls that need a person</h1>\n<p class="means">The record store cannot be read now, so which calls need a person is not known: reload this page in a moment\.</p>\n</body>\n</html>\n$}s
--- no_error_log
[alert]



=== TEST 15: the card says how the last attempt ended in words, not the record's name for it; a name it does not know is shown escaped
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_unknown_stream people;
--- config
    location /_idem/calls/ {
        idem_status;
    }
--- init
main::flush();
main::seed('wd-1', '1000-1', entry => [last_outcome => 'deadline', attempts => 3]);
main::seed('wd-2', '2000-1', entry => [last_outcome => 'error_after_send']);
main::seed('wd-3', '3000-1', entry => [last_outcome => 'client_abort']);
main::seed('wd-4', '4000-1', entry => [last_outcome => '<b>odd</b>']);
main::seed('wd-5', '5000-1', entry => [last_outcome => '-', attempts => 0]);
--- request
GET /_idem/calls/
--- more_headers
Accept: text/html
--- response_body_like eval
qr{^(?!.*<b>)(?!.*last <code>).*<code>wd-5</code>.*<span class="attempts">0 attempts</span>.*<code>wd-4</code>.*<span class="attempts">1 attempt: ended <code>&lt;b&gt;odd&lt;/b&gt;</code></span>.*<code>wd-3</code>.*<span class="attempts">1 attempt: was given up when the client left, no answer</span>.*<code>wd-2</code>.*<span class="attempts">1 attempt: lost its connection after sending, no answer</span>.*<code>wd-1</code>.*<span class="attempts">3 attempts, the last was cut off by the deadline, no answer</span>}s
--- no_error_log
[error]



=== TEST 16: bytes that are not UTF-8 in a call's request line (a raw 0xE9), and in an entry: the list's JSON is UTF-8 still (a strict reader takes it), each such byte U+FFFD, UTF-8 as sent
--- http_config
    idem_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    idem_node_id gw-list;
    idem_unknown_stream people;
--- config
    location /pay {
        idem on;
        idem_record on;
        proxy_read_timeout 100ms;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/sleep/1000/1;
    }
    location /_idem/calls/ {
        idem_status;
    }
--- init
main::flush();
main::seed('utf8-seed', '1000-1', uri => "/p/caf\xc3\xa9/\xe9\xed\xa0\x80",
           entry => [node => "n\xff"]);
my ($code) = IdemWait::raw("POST /pay/\xe9t\xc3\xa9?q=\xe9 HTTP/1.0\r\n"
                       . "Host: localhost\r\nX-Call-Id: ul-utf8\r\n"
                       . "Content-Length: 3\r\n\r\nx=1");
Test::More::is($code, 504, 'the call with a raw 0xE9 timed out: UNKNOWN');
my ($status, $body) = IdemWait::raw("GET /_idem/calls/ HTTP/1.0\r\n"
                                . "Host: localhost\r\n"
                                . "Accept: application/json\r\n\r\n");
Test::More::is($status, 200, 'the list');
my $list = eval { JSON::PP->new->utf8->decode($body) };
Test::More::ok($list, 'a strict JSON reader takes it' . ($@ ? ": $@" : ''));
my %uri = map { $_->{call_id} => $_->{uri} } @{ $list ? $list->{calls} : [] };
Test::More::is($uri{'ul-utf8'}, "/pay/\x{fffd}t\x{e9}",
               'the call\'s 0xE9 read as U+FFFD, its UTF-8 as sent');
Test::More::is($uri{'utf8-seed'}, "/p/caf\x{e9}/" . ("\x{fffd}" x 4),
               'an entry\'s stray byte and surrogate: one U+FFFD each byte');
--- request
GET /_idem/calls/
--- response_body_like eval
qr{^\{"calls":\[\{"call_id":"ul-utf8",[^\[]*"uri":"/pay/\xef\xbf\xbdt\xc3\xa9",[^\[]*\},\{"call_id":"utf8-seed",[^\[]*"uri":"/p/caf\xc3\xa9/(?:\xef\xbf\xbd){4}","node":"n\xef\xbf\xbd",}
--- no_error_log
[alert]
[crit]
[emerg]
