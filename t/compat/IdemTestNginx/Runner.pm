package IdemTestNginx::Runner;

# Runs the blocks of a test file: (re)starts nginx as each block configures
# it, sends the requests and makes the assertions, one per check, named as
# the real Test::Nginx names them so that output reads the same with both.

use strict;
use warnings;

use File::Path qw(remove_tree);
use List::Util qw(min shuffle);
use Test::LongString ();
use Test::More ();
use Time::HiRes qw(sleep);

use IdemTestNginx::Client;
use IdemTestNginx::Config;
use IdemTestNginx::Server;

our @BlockPreprocessors;
our @CleanupHandlers;

# The sections this harness implements, each with the forms its value may
# take once its filters ran (eval makes Perl values of it): those the real
# Test::Nginx interprets for that section.  Any other section is an error,
# and so is any other form: quietly ignoring, say, a misspelt
# --- no_error_log would let a test pass that checks nothing, and the real
# one reads a hash given to --- response_headers as the one line
# "HASH(0x...)": a header of that name must be absent, which it is.
my @Text = ('text');
my @Texts = ('text', 'an array of texts (one per request)');
my @Patterns = ('text', 'a qr// regex',
                'an array of texts and qr// regexes (one per request)');

my %Forms = (
    (map { $_ => \@Text } qw(
        ONLY SKIP LAST config http_config main_config init log_level
        timeout abort wait ignore_response must_die skip_nginx skip_eval)),
    (map { $_ => \@Texts } qw(
        request raw_request more_headers error_code error_code_like
        response_headers response_headers_like)),
    (map { $_ => \@Patterns } qw(
        raw_response_headers_like raw_response_headers_unlike
        response_body response_body_like response_body_unlike)),
    error_log    => ['text', 'a qr// regex',
                     'an array of texts and qr// regexes (patterns)'],
    no_error_log => ['text', 'a qr// regex',
                     'an array of texts and qr// regexes (patterns)'],
    user_files   => ['text', 'an array of [name, content, mtime] arrays'],
);

# Sections of which a block is checked by the first one only.
my @Exclusive = (
    [qw(error_code_like error_code)],
    [qw(response_headers response_headers_like)],
    [qw(response_body response_body_like response_body_unlike)],
);

# Whether a value is of a form named above.
my %IsForm = (
    'text' => sub { !ref $_[0] },
    'a qr// regex' => sub { ref $_[0] eq 'Regexp' },
    'an array of texts (one per request)' => sub {
        ref $_[0] eq 'ARRAY' && !grep { ref } @{ $_[0] };
    },
    'an array of texts and qr// regexes (one per request)' => sub {
        ref $_[0] eq 'ARRAY' && !grep { ref && ref ne 'Regexp' } @{ $_[0] };
    },
    'an array of texts and qr// regexes (patterns)' => sub {
        ref $_[0] eq 'ARRAY' && !grep { ref && ref ne 'Regexp' } @{ $_[0] };
    },
    'an array of [name, content, mtime] arrays' => sub {
        ref $_[0] eq 'ARRAY'
        && !grep { ref ne 'ARRAY' || grep { ref } @$_ } @{ $_[0] };
    },
);

# Test::Base's eval filter hands back $@ as the section's value when the
# code dies or does not compile: a --- no_error_log eval with a typo would
# look for the error message, and pass.  Refused instead, naming the block
# and the section.  (Compiled in Test::Base::Filter, as the original, so
# that the code sees the same names.)
{
    package Test::Base::Filter;

    # loaded now, or it would later put its own back
    BEGIN { require Test::Base::Filter }

    no warnings 'redefine';

    sub eval {
        my $self = shift;
        $self->assert_scalar(@_);
        my $code = shift;
        my @return = CORE::eval($code);
        return @return unless $@;

        my $block = $self->current_block;
        my $orig = $block->original_values;
        my ($section) = grep { ($orig->{$_} // '') eq $code }
                        @{ $block->_section_order || [] };

        IdemTestNginx::Runner::refuse("block \"" . $block->name . "\": the "
            . "eval of --- " . ($section // '(a section)') . " failed: $@");
    }
}

my $MainPid = $$;
my $Prev;            # { block, rand_ports } of the last block with a config
my $ErrLogPos = 0;   # how far error.log has been checked
my $NginxVersion;
my $Finished;

sub run_tests {
    my @blocks = Test::Base::blocks();

    check_sections($_) for @blocks;

    @blocks = shuffle @blocks unless $NoShuffle;

    for my $block (@blocks) {
        $_->($block) for @BlockPreprocessors;
        # the filters (eval) run here, as late as in the real one
        check_forms($block);
        $block->set_value(name => "$0 " . $block->name);
        run_block($block);
    }
}

sub check_sections {
    my ($block) = @_;

    for my $section (@{ $block->_section_order || [] }) {
        next if $Forms{$section};

        my $what = $section eq 'pipelined_requests'
                   ? 'is not supported by' : 'is unknown to';

        refuse("block \"" . $block->name . "\": --- $section $what the "
               . "compat Test::Nginx harness (t/compat); refusing to "
               . "ignore it");
    }

    # The real Test::Nginx checks only the first of these it finds in a
    # block, and so does this one: the others would check nothing.
    my %in = map { $_ => 1 } @{ $block->_section_order || [] };

    for my $group (@Exclusive) {
        my ($used, @ignored) = grep { $in{$_} } @$group;

        next unless @ignored;

        refuse("block \"" . $block->name . "\": --- "
               . join(' and --- ', @ignored) . " would be ignored, since "
               . "the block has --- $used (as in the real Test::Nginx); "
               . "refusing to check nothing");
    }
}

# Each section's value, filtered, must be of one of its forms.
sub check_forms {
    my ($block) = @_;

    for my $section (@{ $block->_section_order || [] }) {
        my @values = @{ $block->{$section} || [] };

        my $form = @values > 1 ? "a list of " . @values . " values"
                                 . " (an eval giving a list, not one value)"
                 : describe($values[0]);

        next if @values <= 1
                && grep { $IsForm{$_}->($values[0]) } @{ $Forms{$section} };

        refuse("block \"" . $block->name . "\": --- $section given as "
               . "$form, which the compat Test::Nginx harness (t/compat) "
               . "cannot interpret there (it takes "
               . join(' or ', @{ $Forms{$section} }) . "); refusing to "
               . "check nothing");
    }
}

# A value's form, in words.
sub describe {
    my ($v) = @_;

    return 'nothing' unless defined $v;
    return 'text' unless ref $v;
    return 'a qr// regex' if ref $v eq 'Regexp';
    return 'a ' . lc(ref $v) . ' reference' unless ref $v eq 'ARRAY';
    return 'an empty array' unless @$v;

    my (%seen, @in);
    for my $form (map { describe($_) } @$v) {
        push @in, $form unless $seen{$form}++;
    }

    return 'an array of ' . join(' and ', map { s/^an? //r } @in);
}

# A failing test, so that the reason shows in the TAP, and the end of the
# run.
sub refuse {
    my ($msg) = @_;

    Test::More::fail($msg);
    die "$0: $msg.\n";
}

sub run_block {
    my ($block) = @_;

    my $name = $block->name;

    if (my ($count, $reason) = skip_spec($block)) {
        SKIP: { Test::More::skip("$name - $reason", $count) }
        return;
    }

    if (defined $block->must_die) {
        run_must_die($block);
        return;
    }

    # Like the real one, a block without --- config reuses the nginx of the
    # block before it (restarted if valgrind mode has stopped it).
    if (defined $block->config) {
        $Prev = { block => $block, rand_ports => {} };
        start_nginx($name) or return;

    } elsif (!$Prev) {
        bail_out("$name - No '--- config' section specified and could not "
                 . "get previous one");

    } elsif (!IdemTestNginx::Server::running()) {
        start_nginx($name) or return;
    }

    # In the real one's package, not main: a sub of the test file is
    # called there as main::name (a bare name would pass here and not
    # there).
    if (defined(my $code = $block->init)) {
        eval "package Test::Nginx::Util;\n$code\n;1"
            or bail_out("$name - init failed: $@");
    }

    $ErrLogPos = $IdemTestNginx::Server::LogStart;

    for my $rep (0 .. $RepeatEach - 1) {
        # Fresh files for each repetition, as the real one does.
        if ($rep > 0) {
            eval { write_user_files($block, $Prev->{rand_ports}); 1 }
                or bail_out("$name - $@");
        }

        run_requests($block, $rep);
    }

    check_valgrind($name) if $UseValgrind;
}

# Starts nginx on a clean server root with the sections of $Prev->{block}.
sub start_nginx {
    my ($name) = @_;

    stop_nginx();

    prepare_servroot($name, @$Prev{qw(block rand_ports)},
                     $UseValgrind ? 'off' : 'on');

    my $error = IdemTestNginx::Server::start();

    return 1 unless defined $error;

    Test::More::fail("$name - start nginx");
    Test::More::diag($error);

    return 0;
}

# A clean server root with the block's user files and nginx.conf.
sub prepare_servroot {
    my ($name, $block, $ports, $daemon) = @_;

    eval {
        IdemTestNginx::Server::setup_servroot();
        write_user_files($block, $ports);
        write_config($block, $ports, $daemon);
        1;
    } or bail_out("$name - $@");
}

sub write_user_files {
    my ($block, $ports) = @_;

    IdemTestNginx::Server::write_user_files(scalar $block->user_files,
                                            $ports);
}

sub write_config {
    my ($block, $ports, $daemon) = @_;

    IdemTestNginx::Server::write_config(
        daemon    => $daemon,
        log_level => $block->log_level // $LogLevel,
        map { $_ => expand_env($block->$_ // '', $ports) }
            qw(config http_config main_config));
}

sub stop_nginx {
    return IdemTestNginx::Server::stop($UseValgrind ? 30 : 5);
}

# --- must_die: nginx must fail to start; error_log/no_error_log are checked
# against what that attempt logged.  No request is sent.
sub run_must_die {
    my ($block) = @_;

    my $name = $block->name;

    stop_nginx();
    prepare_servroot($name, $block, {}, 'on');

    my $want = $block->must_die;

    # As the real one does, nginx is run repeat_each() times, on the same
    # server root; each run's checks read the part of the log it wrote.
    for my $rep (0 .. $RepeatEach - 1) {
        my $status = IdemTestNginx::Server::start_must_die();

        $ErrLogPos = $IdemTestNginx::Server::LogStart;

        if ($status & 127) {
            Test::More::fail("$name - nginx killed by signal "
                             . ($status & 127));

        } elsif ($want =~ /^\d+$/) {
            Test::More::is($status >> 8, $want,
                           "$name - die with the expected exit code");

        } else {
            Test::More::isnt($status, 0, "$name - die as expected");
        }

        warn "WARNING: $name - nginx must die but it does not; killed it\n"
            if $status == 0;

        check_error_log($block, $rep, 'must_die');
    }
}

sub run_requests {
    my ($block, $rep) = @_;

    my $name = $block->name;

    my @reqs = eval { request_list($block) };
    bail_out("$name - $@") if $@;

    my $timeout = eval { parse_time(scalar $block->timeout) };
    bail_out("$name - --- timeout: $@") if $@;
    $timeout //= default_timeout();

    my $many = @reqs > 1;

    for my $i (0 .. $#reqs) {
        my $r = IdemTestNginx::Client::send_request($reqs[$i], $timeout);

        if ($r->{error}) {
            Test::More::fail("$name - $r->{error}");

        } elsif ($r->{timed_out} && !defined $block->abort) {
            Test::More::fail("ERROR: client socket timed out - $name\n");
        }

        if (!defined $block->ignore_response) {
            my $head = $reqs[$i] =~ /^HEAD\s/ ? 1 : 0;
            my ($res, $raw_headers, $error, $warning) =
                IdemTestNginx::Client::parse_response($r->{response}, $head);

            Test::More::fail("$name - $error") if defined $error;
            warn "WARNING: $name - $warning\n" if defined $warning;

            my @args = ($block, $res, $raw_headers, $rep, $i, $many);

            check_error_code(@args);
            check_raw_response_headers(@args);
            check_response_headers(@args);
            check_response_body(@args);
        }

        sleep $block->wait if $block->wait;

        check_error_log($block, $rep);
    }
}

# The block's requests as bytes: --- raw_request (pieces of an array are
# sent as one request), else each --- request (a string, or with eval an
# array of strings) built with --- more_headers.
sub request_list {
    my ($block) = @_;

    my $ports = $Prev ? $Prev->{rand_ports} : {};

    if (defined(my $raw = $block->raw_request)) {
        my @pieces = ref $raw eq 'ARRAY' ? @$raw : ($raw);
        die "--- raw_request must be a string or an array of strings\n"
            if grep { ref } @pieces;
        return join '', map { expand_env($_, $ports) } @pieces;
    }

    my $request = $block->request;

    die "no --- request or --- raw_request section\n" unless defined $request;
    die "--- request must be a string or an array of strings\n"
        if ref $request && ref $request ne 'ARRAY';

    my @specs = ref $request ? @$request : ($request);
    my $more = $block->more_headers;
    my @reqs;

    for my $i (0 .. $#specs) {
        die "--- request: request $i is split into packets, which the "
            . "compat harness does not support\n" if ref $specs[$i];

        my $headers = ref $more eq 'ARRAY' ? $more->[$i] : $more;
        die "--- more_headers lacks data for request $i\n"
            if ref $more && !defined $headers;

        push @reqs, IdemTestNginx::Client::build_request(
                        expand_env($specs[$i], $ports),
                        expand_env($headers, $ports));
    }

    return @reqs;
}

# With several requests, an expected value must be an array with one
# element per request.
sub indexed {
    my ($name, $value, $i, $many) = @_;

    return $value->[$i] if ref $value eq 'ARRAY';

    bail_out("$name - You asked for many requests, the expected results "
             . "should be arrays as well.") if $many;

    return $value;
}

sub check_error_code {
    my ($block, $res, $raw_headers, $rep, $i, $many) = @_;

    my $name = $block->name;
    my $code = ($res && $res->code) || '';

    if (defined(my $like = $block->error_code_like)) {
        my $pat = indexed($name, $like, $i, $many);
        Test::More::like($code, qr/$pat/sm, "$name - status code ok");

    } else {
        my $want = defined $block->error_code
                   ? indexed($name, $block->error_code, $i, $many) : 200;
        Test::More::is($code, $want, "$name - status code ok");
    }
}

sub check_raw_response_headers {
    my ($block, $res, $raw_headers, $rep, $i, $many) = @_;

    my $name = $block->name;

    if (defined(my $v = $block->raw_response_headers_like)) {
        my $pat = indexed($name, $v, $i, $many);
        Test::More::like($raw_headers, qr/$pat/s,
                         "$name - raw resp headers like");
    }

    if (defined(my $v = $block->raw_response_headers_unlike)) {
        my $pat = indexed($name, $v, $i, $many);
        Test::More::unlike($raw_headers, qr/$pat/s,
                           "$name - raw resp headers unlike");
    }
}

# --- response_headers: "Key: value" compared exactly, "!Key" must be absent.
# --- response_headers_like (ignored when response_headers is present): the
# values are anchored regexes.
sub check_response_headers {
    my ($block, $res, $raw_headers, $rep, $i, $many) = @_;

    my $name = $block->name;

    if (defined(my $v = $block->response_headers)) {
        for my $h (parse_headers(indexed($name, $v, $i, $many))) {
            my ($key, $val) = @$h;

            if (!defined $val) {
                Test::More::unlike($raw_headers, qr/^\s*\Q$key\E\s*:/ms,
                    "$name - header $key not present in the raw headers");
                next;
            }

            $val =~ s/\$ServerPort\b/$ServerPort/g;

            my $got = ($res ? $res->header($key) : undef) // '';
            Test::More::is($got, $val, "$name - header $key ok");
        }

    } elsif (defined(my $like = $block->response_headers_like)) {
        for my $h (parse_headers(indexed($name, $like, $i, $many))) {
            my ($key, $pat) = @$h;
            $pat //= '';

            my $got = ($res ? $res->header($key) : undef) // '';
            Test::More::like($got, qr/^$pat$/, "$name - header $key like ok");
        }
    }
}

# "Key: value" lines -> ([key, value], ...); "!Key" gives [key, undef].
# (check_forms() let no other form through.)
sub parse_headers {
    my ($text) = @_;

    my @headers;

    for my $line (split /\n/, $text // '') {
        $line =~ s/^\s+|\s+$//g;
        next if $line eq '';

        if ($line =~ s/^!\s*//) {
            push @headers, [$line, undef];
        } else {
            push @headers, [split /\s*:\s*/, $line, 2];
        }
    }

    return @headers;
}

sub check_response_body {
    my ($block, $res, $raw_headers, $rep, $i, $many) = @_;

    my $name = $block->name;
    my $content = $res ? $res->content : undef;

    if (defined(my $v = $block->response_body)) {
        my $want = indexed($name, $v, $i, $many);
        my $desc = "$name - response_body - response is expected "
                   . "(repeated req $rep, req $i)";

        if (ref $want) {
            Test::More::like($content, $want, "$name - response_body - like "
                                              . "(repeated req $rep, req $i)");
            return;
        }

        $want =~ s/\$ServerPort\b/$ServerPort/g if defined $want;

        if ($NoLongString) {
            Test::More::is($content, $want, $desc);
        } else {
            Test::LongString::is_string($content, $want, $desc);
        }

        return;
    }

    for my $type ('like', 'unlike') {
        my $section = "response_body_$type";
        my $v = $block->$section;
        next unless defined $v;

        my $pat = indexed($name, $v, $i, $many);
        $pat =~ s/\$ServerPort\b/$ServerPort/g;

        my $summary = trim($content) // '';
        my $cmp = $type eq 'like' ? \&Test::More::like : \&Test::More::unlike;

        $cmp->($content, qr/$pat/s,
               "$name - response_body_$type - response is expected "
               . "($summary)");
        return;
    }
}

# --- error_log / --- no_error_log against the part of error.log written
# since the last check (by the last request): one pattern per line, a
# literal substring, unless given with eval as a qr// or an array.
sub check_error_log {
    my ($block, $rep, $must_die) = @_;

    my $name = $block->name;
    my @lines = error_log_lines();

    if (defined(my $v = $block->error_log)) {
        my @pats = patterns($v);

        wait_error_log(\@lines, @pats);

        for my $line (@lines) {
            for my $pat (@pats) {
                next unless defined $pat && matches($line, $pat);
                Test::More::pass("$name - pattern \"$pat\" matches a line in "
                                 . "error.log (req $rep)");
                undef $pat;
            }
        }

        for my $pat (grep { defined } @pats) {
            Test::More::fail("$name - pattern \"$pat\" should match a line "
                             . "in error.log (req $rep)");
        }
    }

    if (defined(my $v = $block->no_error_log)) {
        my @pats = patterns($v);
        my %found;

        for my $n (0 .. $#lines) {
            for my $pat (@pats) {
                next unless matches($lines[$n], $pat);

                $found{$pat} = 1;

                my @next = @lines[$n + 1 .. min($n + 9, $#lines)];

                Test::More::fail("$name - pattern \"" . fmt_str($pat)
                    . "\" should not match any line in error.log but matches"
                    . " line \"" . fmt_str($lines[$n]) . "\" (req $rep)\n"
                    . join '', @next);
            }
        }

        for my $pat (grep { !$found{$_} } @pats) {
            Test::More::pass("$name - pattern \"" . fmt_str($pat)
                             . "\" does not match a line in error.log "
                             . "(req $rep)");
        }
    }

    # Serious messages nobody asked about are worth a look (an [emerg] is
    # what --- must_die expects).
    for my $level ($must_die ? qw(alert crit) : qw(alert crit emerg)) {
        next if value_contains(scalar $block->error_log, "[$level")
                || value_contains(scalar $block->no_error_log, "[$level");

        warn "WARNING: $name - ", fmt_str($_), "\n"
            for grep { /\[$level\]/ } @lines;
    }
}

# bytes of error.log read by this check past $ErrLogPos (which stays where
# it is with check_accum_error_log)
my $ErrLogRead = 0;

sub error_log_lines {
    # Lines of the log phase are written just after the response is sent.
    sleep 0.05;

    my $log = IdemTestNginx::Server::read_from(err_log_file(), $ErrLogPos);

    $ErrLogRead = length $log;
    $ErrLogPos += length $log unless $CheckAccumErrLog;

    return split /^/, $log;
}

# The lines a --- error_log expects and the log lacks yet are waited for
# (read again every 50 ms), up to a deadline far beyond need: the log
# phase of a request can end after its client read the answer's end (a
# lingering close: nginx shuts its side, then logs), later still on a
# loaded machine.  A pattern that never comes fails at the deadline.
sub wait_error_log {
    my ($lines, @pats) = @_;

    my $deadline = Time::HiRes::time() + ($UseValgrind ? 15 : 5);

    while (grep { my $p = $_; !grep { matches($_, $p) } @$lines } @pats) {
        last if Time::HiRes::time() > $deadline;

        sleep 0.05;

        my $pos = $CheckAccumErrLog ? $ErrLogPos + $ErrLogRead : $ErrLogPos;
        my $log = IdemTestNginx::Server::read_from(err_log_file(), $pos);

        $ErrLogRead += length $log;
        $ErrLogPos += length $log unless $CheckAccumErrLog;

        push @$lines, split /^/, $log;
    }
}

sub patterns {
    my ($v) = @_;

    return @$v if ref $v eq 'ARRAY';
    return $v if ref $v;

    chomp $v;
    return split /\n+/, $v;
}

sub matches {
    my ($line, $pat) = @_;

    return ref $pat ? $line =~ $pat : index($line, $pat) >= 0;
}

sub value_contains {
    my ($v, $str) = @_;

    return 0 unless defined $v;
    return scalar grep { value_contains($_, $str) } @$v if ref $v eq 'ARRAY';
    return index("$v", $str) >= 0;
}

# Stops nginx and checks what valgrind found: errors and definitely or
# indirectly lost memory.  A clean block only gets an "ok" when the file has
# no fixed plan, so that planned files count the same with and without
# valgrind.
sub check_valgrind {
    my ($name) = @_;

    my $r = stop_nginx();
    my $log = IdemTestNginx::Server::valgrind_log();

    my @problems = valgrind_problems($log);

    push @problems, "nginx did not exit after SIGQUIT and was killed"
        if $r->{killed};

    push @problems, "valgrind exited with its error status"
        if defined $r->{status}
           && $r->{status} >> 8 == IdemTestNginx::Server::VALGRIND_ERROR_EXIT
           && !@problems;

    if (@problems) {
        Test::More::fail("$name - valgrind clean");
        Test::More::diag(join("\n", @problems) . "\n\n$log");
        return;
    }

    my $plan = Test::More->builder->has_plan;
    Test::More::pass("$name - valgrind clean")
        if !defined $plan || $plan eq 'no_plan';
}

# The first line of each report in a valgrind log ("==pid== Invalid read",
# "==pid== 8 bytes in 1 blocks are definitely lost"), without tool warnings.
sub valgrind_problems {
    my ($log) = @_;

    return grep { !/^Warning:|possibly lost|still reachable/i }
           map  { /^==\d+== (\S.*)/ ? $1 : () }
           split /\n/, $log;
}

# skip_nginx ("N: OP x.y.z[: reason]") and skip_eval ("N: perl code"):
# returns (N, reason) when the block is to be skipped.
sub skip_spec {
    my ($block) = @_;

    my $name = $block->name;

    if (defined(my $spec = $block->skip_nginx)) {
        $spec =~ /^\s*(\d+)\s*:\s*([<>]=?)\s*(\d+)\.(\d+)\.(\d+)
                  (?:\s*:\s*(.*?))?\s*$/x
            or bail_out("$name - Invalid --- skip_nginx spec: $spec");

        my ($count, $op, $reason) = ($1, $2, $6);
        my $want = sprintf '%d.%03d%03d', $3, $4, $5;
        my $have = nginx_version();

        my $skip = $op eq '<'  ? $have <  $want
                 : $op eq '<=' ? $have <= $want
                 : $op eq '>'  ? $have >  $want
                 :               $have >= $want;

        return ($count, $reason || "nginx version $op $3.$4.$5") if $skip;
    }

    if (defined(my $spec = $block->skip_eval)) {
        $spec =~ /^\s*(\d+)\s*:\s*(.*)/s
            or bail_out("$name - Invalid --- skip_eval spec: $spec");

        my ($count, $code) = ($1, $2);
        my $skip = eval "package main; $code";

        bail_out("$name - skip_eval - failed to eval the Perl code "
                 . "\"$code\": $@") if $@;

        return ($count, 'skip_eval') if $skip;
    }

    return;
}

sub nginx_version {
    return $NginxVersion //= do {
        my $out = `$NginxBinary -v 2>&1`;
        $out =~ m{/(\d+)\.(\d+)\.(\d+)}
            or bail_out("Failed to parse the output of \"nginx -v\": $out");
        sprintf '%d.%03d%03d', $1, $2, $3;
    };
}

sub trim {
    my ($s) = @_;

    return undef unless defined $s;

    $s =~ s/^\s+|\s+$//g;
    $s =~ s/\n/ /g;
    $s =~ s/\s{2,}/ /g;

    return $s;
}

sub fmt_str {
    my ($s) = @_;

    chomp $s;
    $s =~ s/"/\\"/g;
    $s =~ s/\r/\\r/g;
    $s =~ s/\n/\\n/g;

    return $s;
}

sub bail_out {
    my ($msg) = @_;

    finish();
    Test::More::BAIL_OUT($msg);
}

# Stops nginx unless TEST_NGINX_NO_CLEAN asks to leave it running (never
# under valgrind, whose report needs nginx to exit).
sub finish {
    return if $Finished++;

    $_->() for @CleanupHandlers;

    stop_nginx() if !$NoClean || $UseValgrind;

    remove_tree($ServRoot) if $Randomize && !$NoClean;
}

END {
    # Not in processes forked by test code, and keep the exit status that
    # Test::Builder is about to report.
    if ($$ == $MainPid) {
        local $?;
        finish();
    }
}

1;
