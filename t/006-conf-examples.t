# Every file in conf-examples/ passes "nginx -t" with the module loaded.

use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use File::Spec;
use Cwd qw(abs_path);

my $root = abs_path(File::Spec->catdir(__FILE__ =~ m{^(.*)/} ? $1 : '.',
                                       '..'));
my $nginx = $ENV{TEST_NGINX_BINARY} || 'nginx';
my ($module) = grep { /ngx_http_idem_module\.so$/ }
               split ' ', ($ENV{TEST_NGINX_LOAD_MODULES} || '');
$module ||= "$root/build/ngx_http_idem_module.so";

my @confs = sort glob("$root/conf-examples/*.conf");
ok(@confs > 0, "conf-examples/ has examples");

for my $conf (@confs) {
    # a prefix whose modules/ holds the module, as the examples' load_module
    # line expects (make run writes the built one's path in its place)
    my $prefix = tempdir(CLEANUP => 1);
    mkdir "$prefix/logs";
    mkdir "$prefix/modules";
    symlink $module, "$prefix/modules/ngx_http_idem_module.so"
        or die "symlink: $!";

    my $out = `$nginx -t -p $prefix/ -c $conf -e $prefix/logs/error.log 2>&1`;
    my $name = (File::Spec->splitpath($conf))[2];

    is($?, 0, "nginx -t accepts conf-examples/$name") or diag($out);
    like($out, qr/test is successful/, "conf-examples/$name: test is successful");
    unlike($out, qr/\[(?:warn|emerg|alert|crit)\]/,
           "conf-examples/$name: no warnings");
}

done_testing();
