# The connect after a backoff with "use poll;": an event method without
# ngx_add_conn, whose events nginx registers in ngx_event_connect_peer().
# The stand-in connection of the backoff was never watched; the real one
# must be.  nginx builds without the poll module (Debian's, with epoll)
# skip this file.
#
# TEST_NGINX_EVENT_TYPE ("use poll;" in events {}) is read by the real
# Test::Nginx and by the compat harness alike.

use strict;
use warnings;
use File::Temp qw(tempdir);

BEGIN {
    my $dir = tempdir('idem-poll-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    my $nginx = $ENV{TEST_NGINX_BINARY} || 'nginx';

    open my $fh, '>', "$dir/nginx.conf" or die "$dir: $!\n";
    print $fh "error_log $dir/error.log; pid $dir/nginx.pid;\n"
              . "events { use poll; }\n";
    close $fh;

    if (system("$nginx -t -q -p $dir -c $dir/nginx.conf"
               . " -e $dir/error.log >/dev/null 2>&1") != 0)
    {
        require Test::More;
        Test::More::plan(skip_all => "$nginx has no poll module");
    }

    $ENV{TEST_NGINX_EVENT_TYPE} = 'poll';
}

use Test::Nginx::Socket 'no_plan';

repeat_each(2);

no_long_string();
run_tests();

__DATA__

=== TEST 1: use poll: retries after a backoff connect and get their answer
--- config
    location /t {
        idem on;
        idem_idempotent on;
        idem_retry 3 backoff=20ms;
        proxy_connect_timeout 2s;
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT/status/503/2;
    }
--- request
POST /t
x=1
--- timeout: 5
--- response_body_like chomp
\An=1 attempt=1 [^\n]*\nn=2 attempt=2 [^\n]*\nn=3 attempt=3 [^\n]*body=x=1\n\z
--- no_error_log
[error]
[alert]
[crit]
