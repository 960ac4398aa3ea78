# The documentation and the command table say the same.  Plain
# Test::More: no nginx needed.
#
# The names come from the sources, not from a list here: every
# ngx_command_t array under ngx_idem_module/ (searched recursively, so a
# file moved within the tree is still found) gives the directives, every
# ngx_http_variable_t array the variables.
#
# (a) Every directive has a heading "### <name>" in docs/directives.md, in
#     nginx.org's form (Syntax:, Default:, Context:, the Syntax line naming
#     the directive), and every such heading names a directive that exists.
#
# (b) Every directive that README.md, HACKING.md or a docs/*.md page names
#     exists.  A name is a word "idem_" followed by lowercase letters,
#     digits and underscores that does not come right after a word
#     character, "$", "/", "-" or ".": so ngx_http_idem_module.c (a file),
#     ngx_http_idem_ctx_t (a type), /_idem/calls/ (a URI) and $idem_state
#     (a variable) are not directive names, while `idem_dedupe_wait`,
#     "idem_redis cluster ..." and "(idem_retry)" are.  Such a word must be
#     a directive, unless it is a name the module writes out that is not a
#     directive: a metric (idem_calls_total, idem_breaker_state ...; a
#     histogram's series too, its name and _bucket, _sum or _count) or a
#     shared memory zone (idem_storm).  Those are the idem_ words of the
#     sources' C string literals (comments left out) that are neither a
#     directive nor a variable; a variable's name without its "$" is not
#     accepted.  The bare word "idem" (the directive "idem", the key
#     prefix "idem:", log lines "idem redis: ...") is not checked.
#
# (c) Every variable the pages name ($idem_...) exists.

use strict;
use warnings;
use Test::More;
use Cwd qw(abs_path);
use File::Find;

my $root = abs_path(__FILE__ =~ m{^(.*)/t/} ? $1 : '.');

sub slurp {
    my ($f) = @_;
    open my $fh, '<', $f or die "$f: $!";
    local $/;
    return <$fh>;
}

my @sources;
find(sub { push @sources, $File::Find::name if /\.[ch]$/ },
     "$root/ngx_idem_module");

my (%cmd, %var, %literal);
my $tables = 0;

# one pass over a C file: comments, string literals and character
# literals, in the order they come, so that "*/*" or '"' fools neither
my $token = qr{(/\*.*?\*/|//[^\n]*|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')}s;

for my $file (sort @sources) {
    my $c = slurp($file);
    my @strings;

    $c =~ s{$token}{
        my $t = $1;
        push @strings, substr($t, 1, -1) if $t =~ /^"/;
        $t =~ m{^/[*/]} ? ' ' : $t;
    }ge;

    while ($c =~ /\bngx_command_t\s+\w+\[\]\s*=\s*\{(.*?)\n\};/sg) {
        $tables++;
        $cmd{$_} = 1 for $1 =~ /ngx_string\("(idem\w*)"\)/g;
    }

    while ($c =~ /\bngx_http_variable_t\s+\w+\[\]\s*=\s*\{(.*?)\n\};/sg) {
        $var{$_} = 1 for $1 =~ /ngx_string\("(idem\w*)"\)/g;
    }

    for my $s (@strings) {
        $literal{$1} = 1 while $s =~ /(?<![\w\$\/.-])(idem(?:_[a-z0-9]+)+)/g;
    }
}

cmp_ok($tables, '>=', 1, "$tables command table(s) found");
cmp_ok(scalar keys %cmd, '>', 20, scalar(keys %cmd) . ' directives');
ok($cmd{idem}, 'the directive "idem" is among them');
cmp_ok(scalar keys %var, '>=', 6, scalar(keys %var) . ' variables');

my %emitted = map { $_ => 1 }
              grep { !$cmd{$_} && !$var{$_} } keys %literal;
ok($emitted{idem_calls_total} && $emitted{idem_storm},
   'metric and zone names found: ' . join(' ', sort keys %emitted));


# (a) docs/directives.md

my $ref = slurp("$root/docs/directives.md");
my %doc;

while ($ref =~ /^### (idem\w*)\n(.*?)(?=^#{1,3} |\z)/msg) {
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


# (b) and (c): every page

my @pages = ('README.md', 'HACKING.md');
opendir my $dh, "$root/docs" or die "docs: $!";
push @pages, map { "docs/$_" } sort grep { /\.md\z/ } readdir $dh;
closedir $dh;

cmp_ok(scalar @pages, '>', 3, scalar(@pages) . ' pages');

my $names = 0;

for my $page (@pages) {
    my @lines = split /\n/, slurp("$root/$page");
    my (@bad, @badvar);

    for my $n (0 .. $#lines) {
        my $line = $lines[$n];

        while ($line =~ /(?<![\w\$\/.-])(idem(?:_[a-z0-9]+)+)/g) {
            $names++;
            my $name = $1;
            (my $series = $name) =~ s/_(?:bucket|sum|count)\z//;
            push @bad, "$name (line " . ($n + 1) . ")"
                unless $cmd{$name} || $emitted{$name} || $emitted{$series};
        }

        while ($line =~ /\$(idem(?:_[a-z0-9]+)+)/g) {
            push @badvar, "\$$1 (line " . ($n + 1) . ")" unless $var{$1};
        }
    }

    is(join(', ', @bad), '', "$page names only directives that exist");
    is(join(', ', @badvar), '', "$page names only variables that exist");
}

cmp_ok($names, '>', 200, "$names directive, metric and zone names read");

done_testing();
