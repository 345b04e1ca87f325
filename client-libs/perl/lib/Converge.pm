package Converge;
use strict;
use warnings;
use Exporter 'import';
use Converge::Error;
use Converge::Fingerprint;
use Converge::Config;
use Converge::Client;

our $VERSION = '0.1.0';
our @EXPORT_OK = qw(converge converge_certificate);

# converge($host, $port, $fingerprint, %opt): the notaries' verdict. %opt: config_dir (else
# discovered), ip, certificate, client (a Converge::Client to use).
sub converge {
    my ($host, $port, $fingerprint, %opt) = @_;
    my $client = delete $opt{client} // Converge::Client->shared(delete $opt{config_dir});
    return $client->check($host, $port, $fingerprint, %opt);
}

# converge_certificate($host, $port, $der, %opt): converge() for a DER certificate (matched by
# SHA-1 and SHA-256).
sub converge_certificate {
    my ($host, $port, $der, %opt) = @_;
    my $client = delete $opt{client} // Converge::Client->shared(delete $opt{config_dir});
    return $client->check_certificate($host, $port, $der, %opt);
}

1;

__END__

=head1 NAME

Converge - ask independent notaries whether they see the certificate you see

=head1 SYNOPSIS

    use Converge qw(converge);

    my $v = converge('www.example.org', 443, 'AB:CD:...');   # SHA-1 or SHA-256
    print $v->trusted ? "trusted\n" : "not trusted: " . $v->reason . "\n";
    printf "%s: %s (%s)\n", $_->name, $_->vote, $_->kind for $v->results;

    # one line for LWP: every HTTPS connection is decided by the notaries
    use Converge::UserAgent;
    my $ua = Converge::UserAgent->new;
    my $r  = $ua->get('https://www.example.org/');

=head1 DESCRIPTION

Convergence (2011) replaced "which certificate authority signed it?" with "do independent
notaries, looking from their own network paths, see the same certificate?". This library is
its Perl client: it asks the notaries of a configuration directory in parallel (legacy
Convergence v1 answers signed with RSA/SHA-1, or the extended C<converge-answer/1> format
signed with Ed25519 and bound to the target, the fingerprint, a nonce and the time), applies a
policy (consensus, majority, minority) and keeps a local SQLite cache in the 2011 add-on's
schema.

=head1 FUNCTIONS

=over

=item converge($host, $port, $fingerprint, %opt)

Returns a L<Converge::Verdict|Converge::Client/"Converge::Verdict">: C<trusted>, C<reason>,
C<from_cache>, C<results> (one L<Converge::NotaryResult|Converge::NotaryIO> per notary asked:
C<name>, C<vote>, C<kind>, C<status>, C<protocol>, C<detail>), C<relay>, C<elapsed>. Options:
C<config_dir> (else C<$CONVERGE_CONFIG_DIR>, C<~/.config/converge>, C</usr/local/etc/converge>),
C<ip> (ask the notaries to connect to this address), C<certificate> (the DER, so that both the
SHA-1 and SHA-256 forms match), C<client> (a L<Converge::Client> to use). Bad input or an
unusable cache dies with a L<Converge::Error> (C<kind>: C<fingerprint>, C<target>, C<config>,
C<bundle>, C<cache-io>); notaries that fail are votes, never errors.

=item converge_certificate($host, $port, $der, %opt)

The same for a DER certificate.

=back

=head1 CONFIGURATION

A directory with C<converge.config> (JSON; every key optional: C<notary-agreement>,
C<quorum>, C<stand-aside>, C<early-return>, C<connect-timeout>, C<notary-timeout>,
C<total-timeout>, C<cache-lifetime>, C<db>, C<userdb>, C<bounce>, C<bounce-port>,
C<extended>, C<extended-nonce>, C<max-skew>, C<max-response-bytes>, C<notaries-dir>),
C<notaries-available/*.notary> bundles and C<notaries-enabled/> symlinks to them. See
L<Converge::Config>.

=head1 SEE ALSO

L<Converge::Client>, L<Converge::TLS>, L<Converge::UserAgent>, L<Converge::HTTP::Tiny>,
L<Converge::Error>.

=cut
