# Shim found first through .proverc's -It/compat.
#
# If OpenResty's Test::Nginx is installed (another Test/Nginx/Socket.pm later
# in @INC), it is loaded, with t/compat left out of @INC so that its own
# Test::Nginx::Util comes along; IDEM_TEST_COMPAT=1 forces the project's
# implementation (t/compat/IdemTestNginx/Socket.pm), which is otherwise the
# fallback.  Both define package Test::Nginx::Socket, whose import() then
# handles "use Test::Nginx::Socket 'no_plan'" and friends.

package IdemTestNginx::Shim;

use strict;
use warnings;

use Cwd ();
use File::Basename qw(dirname);

my $key = 'Test/Nginx/Socket.pm';
my $compat = Cwd::abs_path(dirname(dirname(dirname(__FILE__))));

my @others = grep {
    !ref && (Cwd::abs_path($_) // '') ne $compat
} @INC;

my ($real) = grep { -f "$_/$key" } @others;

if (defined $real && ($ENV{IDEM_TEST_COMPAT} // '') ne '1') {
    my $file = "$real/$key";

    local @INC = grep { ref || (Cwd::abs_path($_) // '') ne $compat } @INC;

    $INC{$key} = $file;

    # "do" rather than require: this very file holds the require slot.
    my $ok = do $file;
    die $@ if $@;
    die "cannot read $file: $!\n" unless defined $ok;

} else {
    require IdemTestNginx::Socket;
}

1;
