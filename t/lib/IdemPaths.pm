package IdemPaths;

# Where a test finds the block's nginx and where it puts files of its own.
#
# servroot(): the server root of the Test::Nginx server, as the harness
# names it in TEST_NGINX_SERVER_ROOT (both the real Test::Nginx and
# t/compat set it when they load, from TEST_NGINX_SERVROOT or t/servroot),
# so that runs side by side, each with its own TEST_NGINX_SERVROOT, each
# read their own.
#
# scratch(): a directory for the files a test writes itself (curl's
# answers, ...), t/tmp/<file>-<port>/, one per test file and server port.
# Never the server root: the real Test::Nginx removes its own folders
# there before a block and then the folder itself, and bails out when
# something else is left in it.  Emptied when first asked for; removed
# when the file ends passing, kept to be looked at when it fails.

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(basename);
use File::Path qw(make_path remove_tree);

our @EXPORT_OK = qw(servroot error_log conf_file h2_url scratch);
use Exporter 'import';

sub servroot {
    my $sr = $ENV{TEST_NGINX_SERVER_ROOT};
    defined $sr && length $sr
        or die "TEST_NGINX_SERVER_ROOT not set (load Test::Nginx::Socket "
             . "first)\n";
    return $sr;
}

sub error_log { servroot() . '/logs/error.log' }
sub conf_file { servroot() . '/conf/nginx.conf' }

# the URL of a path on the block's HTTP/2 server (its "listen ... http2"
# in the nginx.conf written)
sub h2_url {
    my ($path) = @_;
    local (@ARGV, $/) = (conf_file());
    my ($port) = <> =~ /listen 127\.0\.0\.1:(\d+) http2;/
        or die "no http2 listen in " . conf_file() . "\n";
    return "http://127.0.0.1:$port$path";
}

my $top = abs_path(__FILE__ =~ m{^(.*)/t/lib/} ? $1 : '.');
my ($scratch, $owner);

sub scratch {
    return $scratch if defined $scratch;

    my $file = basename($0, '.t');
    my $port = $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT}
               || 1984;

    my $root = $ENV{TEST_NGINX_ROOT} || $top;

    $scratch = "$root/t/tmp/$file-$port";
    $owner = $$;
    remove_tree($scratch);
    make_path($scratch);
    return $scratch;
}

END {
    local $?;
    # only the process that made it (not a client the file forked), and
    # only when every test passed
    if (defined $scratch && defined $owner && $$ == $owner
        && Test::More->can('builder') && Test::More->builder->is_passing)
    {
        remove_tree($scratch);
    }
}

1;
