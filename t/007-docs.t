# The directive reference and the command table say the same: every
# directive of ngx_http_idem_module.c's command table has a heading
# "### <name>" in docs/directives.md, in nginx.org's form (Syntax:, Default:,
# Context:, the Syntax line naming the directive), and every such heading
# names a directive that exists.  Plain Test::More: no nginx needed.

use strict;
use warnings;
use Test::More;
use Cwd qw(abs_path);

my $root = abs_path(__FILE__ =~ m{^(.*)/t/} ? $1 : '.');

sub slurp {
    my ($f) = @_;
    open my $fh, '<', $f or die "$f: $!";
    local $/;
    return <$fh>;
}

my $c = slurp("$root/ngx_idem_module/ngx_http_idem_module.c");
my ($table) = $c =~ /ngx_http_idem_commands\[\]\s*=\s*\{(.*?)\n\};/s;
ok(defined $table, 'the command table is found');

my %cmd = map { $_ => 1 } ($table // '') =~ /ngx_string\("(idem_\w+)"\)/g;
cmp_ok(scalar keys %cmd, '>', 20, scalar(keys %cmd) . ' directives');

my $readme = slurp("$root/docs/directives.md");
my %doc;

while ($readme =~ /^### (idem_\w+)\n(.*?)(?=^#{1,3} |\z)/msg) {
    $doc{$1} = $2;
}

for my $name (sort keys %cmd) {
    my $text = $doc{$name};
    ok(defined $text, "$name has a heading in docs/directives.md") or next;
    like($text, qr/^    Syntax:  \Q$name\E[ ;]/m, "$name: its Syntax line");
    like($text, qr/^    Default: /m, "$name: a Default line");
    like($text, qr/^    Context: (?:http|server|location)/m,
         "$name: a Context line");
}

for my $name (sort keys %doc) {
    ok($cmd{$name}, "the heading $name names a directive that exists");
}

done_testing();
