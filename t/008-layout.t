# The sources' layout, read from their includes and calls (HACKING.md,
# "Layout"): calls and includes go one way, down this order, and no files
# call each other in a loop:
#
#     util      ngx_http_idem_util.c: helpers on nginx's own API
#     store     store/: the store's interface; store/redis/: Redis behind it
#     parts     each part of a call (the other files of ngx_idem_module/)
#     config    ngx_http_idem_conf.c, _directive.c: the configuration
#     phases    ngx_http_idem_handler.c, _filter.c, _ids_filter.c
#     module    ngx_http_idem_module.c: the command table, the hooks
#
# A file may use its own layer and the ones above it in this list.  Beside
# the order: the HTTP side reaches the store only through the functions of
# store/ngx_http_idem_store.h and never includes a Redis header; hiredis,
# Redis commands and Lua live only under store/redis/; ngx_http_idem_common.h
# holds types, no function prototypes; a header declares only functions of
# its own .c (or its family's: storm*.c for storm.h, store/redis/ for the
# store's interface), and each .c includes its own header; the files of
# fuzz/ call each other in no loop either.  Plain Test::More: the sources
# are read, nothing is built.

use strict;
use warnings;
use Test::More;
use Cwd qw(abs_path);
use File::Find;

my $root = abs_path(__FILE__ =~ m{^(.*)/t/} ? $1 : '.');
my $src = "$root/ngx_idem_module";

my @layers = qw(util store parts config phases module);
my %rank = map { $layers[$_] => $_ } 0 .. $#layers;

my %layer_of = (
    util => 'util', conf => 'config', directive => 'config',
    handler => 'phases', filter => 'phases', ids_filter => 'phases',
    module => 'module',
);

# the Redis commands the store sends (a string that is one of them, outside
# store/redis/, is a command sent from the wrong side)
my %redis_command = map { $_ => 1 } qw(
    APPEND ASKING AUTH CLUSTER DEL EVAL EVALSHA EXISTS EXPIRE GET HDEL HGET
    HGETALL HINCRBY HMGET HSET HSETNX INFO MULTI EXEC PEXPIRE PING PTTL
    PUBLISH READONLY ROLE SCRIPT SELECT SENTINEL SET SUBSCRIBE WAIT XADD
    XREAD XTRIM
);

sub slurp {
    my ($f) = @_;
    open my $fh, '<', $f or die "$f: $!";
    local $/;
    return <$fh>;
}

# comments and string literals out (the strings are returned apart)
sub code {
    my ($text, $strings) = @_;

    $text =~ s{(/\*.*?\*/)|("(?:\\.|[^"\\\n])*")|('(?:\\.|[^'\\\n])*')}{
        if (defined $1) { ' ' }
        else { push @$strings, substr($+, 1, -1) if defined $2; '""' }
    }gse;

    return $text;
}

my (%file, @files);

find({ no_chdir => 1, wanted => sub {
    return unless /\.(?:c|h|lua)$/;
    (my $rel = $File::Find::name) =~ s{^\Q$root\E/}{};
    push @files, $rel;
} }, $src, "$root/fuzz");

@files = sort @files;

for my $f (@files) {
    next if $f =~ /\.lua$/;
    my @strings;
    my $raw = slurp("$root/$f");
    $file{$f} = {
        raw => $raw,
        code => code($raw, \@strings),
        strings => \@strings,
        includes => [ $raw =~ /^#include\s+[<"]([^>"]+)[>"]/mg ],
    };
}

sub side {
    my ($f) = @_;
    return 'fuzz' if $f =~ m{^fuzz/};
    return 'redis' if $f =~ m{/store/redis/};
    return 'store' if $f =~ m{/store/};
    return 'http';
}

sub layer {
    my ($f) = @_;
    return 'store' if side($f) =~ /^(?:store|redis)$/;
    my ($part) = $f =~ m{ngx_http_idem_(\w+)\.[ch]$};
    return $layer_of{$part} // 'parts';
}

# functions defined (not static) and declared, per file

my (%defines, %defined_in, %declares);

for my $f (grep { /\.c$/ } keys %file) {
    my $code = $file{$f}{code};

    # nginx's style: the type on a line, the name at column 0 below it
    # (in fuzz/ any name: a stand-in of nginx's own would be one too)

    my $names = side($f) eq 'fuzz' ? qr/\w+/ : qr/ngx_http_idem_\w+/;

    while ($code =~ /^(\w[^\n;{]*)\n($names)\(/mg) {
        my ($type, $name) = ($1, $2);
        next if $type =~ /^static\b/;
        next if $type =~ /^__attribute__/ && $f !~ m{^fuzz/};
        $defines{$f}{$name} = 1;
        push @{ $defined_in{ side($f) eq 'fuzz' ? 'fuzz' : 'module' }{$name} },
            $f;
    }
}

for my $f (grep { /\.h$/ } keys %file) {
    my $code = $file{$f}{code};

    # a line at column 0 that names a function and ends its declaration
    my $decl = qr/^(?!static|typedef|#|\}|\s)[^\n;{}()]*?\b(\w+)\([^;{]*\);/m;

    while ($code =~ /$decl/g) {
        $declares{$f}{$1} = 1;
    }
}

# 1. calls and references between files, and no loop among them

my %edge;

for my $scope ('module', 'fuzz') {
    my $owners = $defined_in{$scope} || {};

    for my $f (grep { /\.c$/ } keys %file) {
        next if ($scope eq 'fuzz') != (side($f) eq 'fuzz');

        my %used = map { $_ => 1 } $file{$f}{code} =~ /\b(\w+)\b/g;

        for my $name (keys %used) {
            next if $defines{$f}{$name};
            for my $to (@{ $owners->{$name} || [] }) {

                # two fuzz targets are two programs: they never link
                next if $f =~ m{/ngx_http_idem_fuzz_\w+\.c$}
                        && $to =~ m{/ngx_http_idem_fuzz_\w+\.c$};

                $edge{$f}{$to}{$name} = 1;
            }
        }
    }
}

my %seen_loop;

{
    # Tarjan's strongly connected components
    my ($index, @stack, %on, %idx, %low, @loops) = (0);

    my $visit;
    $visit = sub {
        my ($v) = @_;
        $idx{$v} = $low{$v} = $index++;
        push @stack, $v;
        $on{$v} = 1;

        for my $w (sort keys %{ $edge{$v} || {} }) {
            if (!exists $idx{$w}) {
                $visit->($w);
                $low{$v} = $low{$w} if $low{$w} < $low{$v};
            } elsif ($on{$w}) {
                $low{$v} = $idx{$w} if $idx{$w} < $low{$v};
            }
        }

        if ($low{$v} == $idx{$v}) {
            my @comp;
            while (1) {
                my $w = pop @stack;
                delete $on{$w};
                push @comp, $w;
                last if $w eq $v;
            }
            push @loops, [ sort @comp ] if @comp > 1;
        }
    };

    $visit->($_) for grep { !exists $idx{$_} } sort grep { /\.c$/ } keys %file;

    if ($ENV{IDEM_LAYOUT_DEBUG}) {
    for my $f (sort keys %edge) {
        diag("$f -> " . join(' ', map { s{.*/}{}r } sort keys %{ $edge{$f} }));
    }
}

    ok(!@loops, 'no files call each other in a loop')
        or diag(join "\n", map { 'a loop: ' . join(' ', @$_) } @loops);
}

# 2. calls go down the order; the HTTP side calls the store's interface

my $store_h = 'ngx_idem_module/store/ngx_http_idem_store.h';
my %interface = %{ $declares{$store_h} || {} };
ok(scalar keys %interface > 5, 'the store interface declares '
   . scalar(keys %interface) . ' functions');

my @wrong;

for my $f (sort keys %edge) {
    next if side($f) eq 'fuzz';

    for my $to (sort keys %{ $edge{$f} }) {
        my @names = sort keys %{ $edge{$f}{$to} };

        if ($rank{ layer($to) } > $rank{ layer($f) }) {
            push @wrong, "$f (" . layer($f) . ") calls $to (" . layer($to)
                         . "): @names";
        }

        if (side($f) eq 'http' && side($to) eq 'redis') {
            my @outside = grep { !$interface{$_} } @names;
            push @wrong, "$f calls the Redis store's own @outside" if @outside;
        }

        if (side($f) =~ /^(?:store|redis)$/ && side($to) eq 'http'
            && layer($to) ne 'util')
        {
            push @wrong, "the store's $f calls the HTTP side's $to: @names";
        }
    }
}

ok(!@wrong, "calls go down the order") or diag(join "\n", @wrong);

# 3. includes: the same order; Redis headers and hiredis in store/redis/

my %header_file = map { m{([^/]+)$}; ($1 => $_) } grep { /\.h$/ } keys %file;
@wrong = ();

for my $f (sort grep { side($_) ne 'fuzz' } keys %file) {
    for my $inc (@{ $file{$f}{includes} }) {
        if ($inc =~ m{^hiredis/}) {
            push @wrong, "$f includes <$inc>" if side($f) ne 'redis';
            next;
        }

        my $h = $header_file{$inc} or next;

        if (side($h) eq 'redis' && side($f) ne 'redis') {
            push @wrong, "$f includes the Redis store's $inc";
        }

        if (side($f) =~ /^(?:store|redis)$/ && side($h) eq 'http'
            && layer($h) ne 'util')
        {
            push @wrong, "the store's $f includes the HTTP side's $inc";
        }

        if (side($h) eq 'http' && side($f) eq 'http'
            && $rank{ layer($h) } > $rank{ layer($f) }
            && $h !~ /ngx_http_idem_module\.h$/)
        {
            push @wrong, "$f (" . layer($f) . ") includes $inc ("
                         . layer($h) . ')';
        }
    }
}

ok(!@wrong, 'includes go down the order, Redis headers stay in the store')
    or diag(join "\n", @wrong);

# no header includes itself through others

{
    my %hinc;
    for my $h (grep { /\.h$/ } keys %file) {
        $hinc{$h} = [ grep { defined } map { $header_file{$_} }
                      @{ $file{$h}{includes} } ];
    }

    my @cycles;
    for my $h (sort keys %hinc) {
        my (%seen, @todo) = ();
        @todo = @{ $hinc{$h} };
        while (defined(my $n = shift @todo)) {
            next if $seen{$n}++;
            if ($n eq $h) { push @cycles, $h; last }
            push @todo, @{ $hinc{$n} || [] };
        }
    }

    ok(!@cycles, 'no header includes itself')
        or diag(join "\n", map { "loop: $_" } @cycles);
}

# 4. hiredis, Redis commands and Lua only under store/redis/

@wrong = ();

for my $f (@files) {
    next if $f =~ m{^ngx_idem_module/store/redis/} || $f =~ m{^fuzz/};

    if ($f =~ /\.lua$/) {
        push @wrong, "$f: Lua outside store/redis/";
        next;
    }

    for my $s (@{ $file{$f}{strings} }) {
        push @wrong, "$f sends the Redis command \"$s\"" if $redis_command{$s};
    }

    my $code = $file{$f}{code};
    push @wrong, "$f uses hiredis" if $code =~ /\bredis(?:Async)?[A-Z]\w*\(/;
    push @wrong, "$f uses the store's Lua"
        if $code =~ /NGX_HTTP_IDEM_REDIS_LUA_/;
}

ok(!@wrong, 'hiredis, Redis commands and Lua only under store/redis/')
    or diag(join "\n", @wrong);

# 5. headers: the module's holds types; each declares its own file's

my $module_h = 'ngx_idem_module/ngx_http_idem_common.h';
my @protos = sort keys %{ $declares{$module_h} || {} };
ok(!@protos, "$module_h declares no function") or diag("declares: @protos");

@wrong = ();

for my $h (sort keys %declares) {
    next if side($h) eq 'fuzz';
    my ($stem) = $h =~ m{ngx_http_idem_(\w+?)(?:_common)?\.h$};

    for my $name (sort keys %{ $declares{$h} }) {
        my @at = @{ $defined_in{module}{$name} || [] };

        if (!@at) {
            push @wrong, "$h declares $name, defined nowhere";
            next;
        }

        for my $c (@at) {
            my $ok = $h eq $store_h ? side($c) eq 'redis'
                   : $c =~ m{ngx_http_idem_\Q$stem\E(?:_\w+)?\.c$}
                     && side($c) eq side($h);
            push @wrong, "$h declares $name of $c" unless $ok;
        }
    }
}

for my $c (sort grep { /\.c$/ && side($_) ne 'fuzz' } keys %file) {
    next unless %{ $defines{$c} || {} };

    my ($dir, $stem) = $c =~ m{^(.*)/ngx_http_idem_(\w+)\.c$};
    (my $family = $stem) =~ s/_.*//;
    my @own = grep { $header_file{$_} } ("ngx_http_idem_$stem.h",
                                          "ngx_http_idem_$family.h",
                                          "ngx_http_idem_${family}_common.h");
    push @wrong, "$c includes no header of its own (@own)"
        unless grep { my $o = $_; grep { $_ eq $o } @{ $file{$c}{includes} } }
               @own;

    for my $name (sort keys %{ $defines{$c} }) {
        next if grep { $declares{$_}{$name} } keys %declares;
        push @wrong, "$c defines $name, declared in no header";
    }
}

ok(!@wrong, 'each header declares its own file\'s functions')
    or diag(join "\n", @wrong);

# 6. the module's file: its table and hooks only

my $lines = () = $file{'ngx_idem_module/ngx_http_idem_module.c'}{raw} =~ /\n/g;
cmp_ok($lines, '<=', 700, "ngx_http_idem_module.c: $lines lines");

done_testing();
