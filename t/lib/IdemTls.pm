package IdemTls;

# A self-signed certificate for the tests' https upstreams, made once per
# test file with openssl.  Its directory is exported as
# TEST_NGINX_CERT_DIR (cert.pem, key.pem), so that configs say
# "ssl_certificate $TEST_NGINX_CERT_DIR/cert.pem;" under both the real
# Test::Nginx and the compat harness.

use strict;
use warnings;
use File::Temp qw(tempdir);

sub import {
    return if $ENV{TEST_NGINX_CERT_DIR} && -f "$ENV{TEST_NGINX_CERT_DIR}/cert.pem";

    my $dir = tempdir('idem-tls-XXXXXX', TMPDIR => 1, CLEANUP => 1);

    # openssl draws its progress on stderr
    open my $stderr, '>&', \*STDERR or die "dup: $!\n";
    open STDERR, '>', '/dev/null' or die "/dev/null: $!\n";

    my $rc = system('openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes',
           '-days', '2', '-subj', '/CN=localhost',
           '-keyout', "$dir/key.pem", '-out', "$dir/cert.pem");

    open STDERR, '>&', $stderr or die "dup: $!\n";

    $rc == 0 or die "openssl could not make a test certificate\n";

    $ENV{TEST_NGINX_CERT_DIR} = $dir;
}

1;
