package Converge::Bundle;
use strict;
use warnings;
use Digest::SHA ();
use MIME::Base64 ();
use Net::SSLeay ();
use Converge::Ed25519 qw(weak_key);
use Converge::Error;
use Converge::Fingerprint;
use Converge::Transparency;
use Converge::JSON qw(parse_json is_object json_int json_number json_string);

our $VERSION = '0.1.0';

# One logical notary (an organisation), parsed from a .notary file (v1, or the v0 form):
# name, version, hosts (Converge::Bundle::Host: host, ssl_port, http_port, certificate PEM,
# der, pin), bundle_location, region, protocols and signing_keys (Converge::Bundle::Key).

use constant EXTENDED_FORMAT  => 'converge-answer/1';
use constant LEGACY_FORMAT    => 'convergence-v1';
use constant MAX_BYTES        => 65536;
use constant MAX_HOSTS        => 16;
use constant MAX_SIGNING_KEYS => 8;
our $HOST_RE = qr/\A[A-Za-z0-9._:-]{1,253}\z/;
my $PEM_RE = qr/\A[\t\n\f\r ]*-----BEGIN CERTIFICATE-----\r?\n([A-Za-z0-9+\/=\r\n]+)-----END CERTIFICATE-----[\t\n\f\r ]*\z/;

sub _bad { Converge::Error->throw('bundle', $_[0]) }

sub name            { $_[0]{name} }
sub version         { $_[0]{version} }
sub hosts           { @{ $_[0]{hosts} } }
sub bundle_location { $_[0]{bundle_location} }
sub region          { $_[0]{region} }
sub protocols       { @{ $_[0]{protocols} } }
sub signing_keys    { @{ $_[0]{signing_keys} } }
sub transparency    { $_[0]{transparency} }    # the log's policy (Converge::Transparency), or undef

# Whether the bundle advertises converge-answer/1 and carries its signing keys.
sub offers_extended {
    my ($self) = @_;
    return (grep { $_ eq EXTENDED_FORMAT } @{ $self->{protocols} }) && @{ $self->{signing_keys} } ? 1 : 0;
}

# Standard base64 with padding (alphabet and padding checked, trailing bits not), or undef.
sub strict_base64 {
    my ($t) = @_;
    return undef if !defined $t || ref $t || length($t) % 4
        || $t !~ m{\A[A-Za-z0-9+/]*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\z};
    return MIME::Base64::decode_base64($t);
}

# Unpadded base64url (trailing bits not checked), or undef.
sub unb64url {
    my ($t) = @_;
    return undef if !defined $t || ref $t || length($t) % 4 == 1 || $t !~ /\A[A-Za-z0-9_-]*\z/;
    (my $s = $t) =~ tr{-_}{+/};
    return MIME::Base64::decode_base64($s . ('=' x ((4 - length($s) % 4) % 4)));
}

sub b64url {
    my $s = MIME::Base64::encode_base64($_[0], '');
    $s =~ tr{+/}{-_};
    $s =~ s/=+\z//;
    return $s;
}

sub pem_of_der {
    my ($der) = @_;
    my $b = MIME::Base64::encode_base64($der, '');
    return "-----BEGIN CERTIFICATE-----\n" . join('', map { "$_\n" } unpack('(A64)*', $b)) . "-----END CERTIFICATE-----\n";
}

sub der_of_pem {
    my ($pem) = @_;
    return undef unless defined $pem && $pem =~ /-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----/s;
    (my $b = $1) =~ s/\s+//g;
    return undef if $b =~ m{[^A-Za-z0-9+/=]};
    return MIME::Base64::decode_base64($b);
}

# Whether DER bytes are exactly one certificate (OpenSSL reads it, nothing after it).
sub certificate_parses {
    my ($der) = @_;
    my $bio = Net::SSLeay::BIO_new(Net::SSLeay::BIO_s_mem()) or return 0;
    Net::SSLeay::BIO_write($bio, $der);
    my $x = Net::SSLeay::d2i_X509_bio($bio);
    Net::SSLeay::BIO_free($bio);
    return 0 unless $x;
    my $again = der_of_pem(Net::SSLeay::PEM_get_string_X509($x));
    Net::SSLeay::X509_free($x);
    return defined $again && $again eq $der ? 1 : 0;
}

sub _port {
    my ($obj, $key) = @_;
    my $n = json_int($obj->{$key});
    _bad("$key must be an integer port 1..65535") unless defined $n && $n >= 1 && $n <= 65535;
    return $n;
}

sub _host {
    my ($v) = @_;
    _bad('a host entry must be an object') unless is_object($v);
    my $host = $v->{'host'};
    _bad('host must be a DNS name or an IP address') unless defined json_string($host) && $host =~ $HOST_RE;
    my $pem = $v->{'certificate'};
    _bad("certificate of $host is not one PEM certificate") unless defined json_string($pem) && $pem =~ $PEM_RE;
    (my $b = $1) =~ s/[\r\n]//g;
    my $der = strict_base64($b);
    _bad("certificate of $host does not parse") unless defined $der && certificate_parses($der);
    return Converge::Bundle::Host->new(host => $host, ssl_port => _port($v, 'ssl_port'), http_port => _port($v, 'http_port'),
        certificate => $pem, der => $der, pin => Converge::Fingerprint->of($der));
}

# The key id of a raw Ed25519 public key: the first 8 bytes of its SHA-256, lower-case hex.
sub key_id_of { unpack 'H16', Digest::SHA::sha256($_[0]) }

sub _signing_key {
    my ($k) = @_;
    _bad('a signing key entry must be an object') unless is_object($k);
    for my $name (sort keys %$k) {
        _bad("unknown signing key field \"$name\"") unless $name =~ /\A(?:alg|key_id|public_key|status|valid_until)\z/;
    }
    my $alg = $k->{'alg'};
    _bad('signing key alg must be ed25519') unless defined json_string($alg) && $alg eq 'ed25519';
    my $raw = unb64url($k->{'public_key'});
    _bad('signing key public_key must be unpadded base64url') unless defined $raw;
    _bad('an Ed25519 public key has 32 bytes') unless length $raw == 32;
    if (defined(my $weak = weak_key($raw))) { _bad("signing key: $weak") }
    my $kid = $k->{'key_id'};
    _bad('signing key id does not match its public key') unless defined json_string($kid) && $kid eq key_id_of($raw);
    my $status = $k->{'status'} // '';
    my $until = $k->{'valid_until'};
    if ((json_string($status) // '') eq 'current') {
        _bad('a current signing key has no valid_until') if exists $k->{'valid_until'} && defined $until;
        return Converge::Bundle::Key->new(key_id => $kid, public_key => $raw, current => 1, valid_until => 0);
    }
    if ((json_string($status) // '') eq 'retired') {
        my $u = json_int($until);
        _bad('a retired signing key needs valid_until (unix seconds)')
            unless defined $u && $u > 0 && $u <= Converge::JSON::MAX_SAFE_INTEGER;
        return Converge::Bundle::Key->new(key_id => $kid, public_key => $raw, current => 0, valid_until => $u);
    }
    _bad('signing key status must be current or retired');
}

# Parses a list of signing key entries (a bundle's signing_keys).
sub parse_signing_keys {
    my ($v) = @_;
    _bad('signing_keys must be a non-empty list') unless ref $v eq 'ARRAY' && @$v;
    _bad('more than ' . MAX_SIGNING_KEYS . ' signing keys') if @$v > MAX_SIGNING_KEYS;
    my (@out, %seen);
    for my $x (@$v) {
        my $k = _signing_key($x);
        _bad('signing key ids repeat') if $seen{ $k->key_id }++;
        push @out, $k;
    }
    _bad('signing_keys must hold exactly one current key') unless 1 == grep { $_->current } @out;
    return \@out;
}

sub _chars { my $s = $_[0]; return length $s }

# Parses and validates a .notary file (bytes); dies with a Converge::Error of kind "bundle".
sub parse {
    my ($class, $data) = @_;
    _bad('bundle larger than ' . MAX_BYTES . ' bytes') if length $data > MAX_BYTES;
    my ($obj, $ok) = parse_json($data);
    _bad('bundle is not a JSON object') unless $ok && is_object($obj);
    my $version = 0;
    if (exists $obj->{'version'}) {
        my $v = json_number($obj->{'version'});
        _bad('unsupported bundle version') unless defined $v && ($v == 0 || $v == 1);
        $version = int $v;
    }
    if ($version == 0) {
        my $h = _host($obj);
        return bless { name => $h->host, version => 0, hosts => [$h], protocols => [], signing_keys => [] }, $class;
    }
    my $name = $obj->{'name'};
    _bad('name must be a non-empty string') if !defined json_string($name) || $name !~ /\S/ || length $name > 200;
    my $hosts = $obj->{'hosts'};
    _bad('hosts must be a non-empty list') unless ref $hosts eq 'ARRAY' && @$hosts;
    _bad('more than ' . MAX_HOSTS . ' hosts') if @$hosts > MAX_HOSTS;
    my $loc = $obj->{'bundle_location'};
    _bad('bundle_location must be an https:// URL ending in .notary')
        if defined $loc && (ref $loc || $loc !~ m{\Ahttps://.*\.notary\z}s || length $loc > 2048);
    my $region = $obj->{'region'};
    _bad('region must be an ISO-3166 alpha-2 code') if defined $region && (!defined json_string($region) || $region !~ /\A[A-Za-z]{2}\z/);
    my @parsed = map { _host($_) } @$hosts;
    my @protocols;
    if (exists $obj->{'protocols'}) {
        my $p = $obj->{'protocols'};
        _bad('protocols must be a list of at most 16 strings') unless ref $p eq 'ARRAY' && @$p <= 16;
        for my $x (@$p) {
            _bad('protocols must be a list of short strings') if !defined json_string($x) || length $x < 1 || length $x > 64;
            push @protocols, $x;
        }
    }
    my $keys = exists $obj->{'signing_keys'} ? parse_signing_keys($obj->{'signing_keys'}) : [];
    _bad('protocols lists ' . EXTENDED_FORMAT . ' but the bundle has no signing_keys')
        if (grep { $_ eq EXTENDED_FORMAT } @protocols) && !@$keys;
    my $log = exists $obj->{'transparency'} ? Converge::Transparency::parse_policy($obj->{'transparency'}) : undef;
    return bless { name => $name, version => 1, hosts => \@parsed, bundle_location => $loc,
        region => defined $region ? uc $region : undef, protocols => \@protocols, signing_keys => $keys,
        transparency => $log }, $class;
}

package Converge::Bundle::Host;
use strict;
use warnings;

# One physical notary host: host, ssl_port, http_port, certificate (PEM), der, pin.
sub new         { my ($c, %a) = @_; bless {%a}, $c }
sub host        { $_[0]{host} }
sub ssl_port    { $_[0]{ssl_port} }
sub http_port   { $_[0]{http_port} }
sub certificate { $_[0]{certificate} }
sub der         { $_[0]{der} }
sub pin         { $_[0]{pin} }

package Converge::Bundle::Key;
use strict;
use warnings;

# One Ed25519 key of the extended format: trusted always when current, while now <= valid_until
# when retired.
sub new         { my ($c, %a) = @_; bless {%a}, $c }
sub key_id      { $_[0]{key_id} }
sub public_key  { $_[0]{public_key} }
sub current     { $_[0]{current} }
sub valid_until { $_[0]{valid_until} }
sub trusted_at  { $_[0]{current} || $_[1] <= $_[0]{valid_until} }

1;

__END__

=head1 NAME

Converge::Bundle - a notary bundle (.notary file, v0 and v1)

=head1 SYNOPSIS

    my $b = Converge::Bundle->parse($bytes);
    print $b->name, ': ', join(', ', map { $_->host . ':' . $_->ssl_port } $b->hosts), "\n";
    print "extended\n" if $b->offers_extended;

=head1 DESCRIPTION

C<parse> validates a bundle of at most 64 KiB: v0 (one host) or v1 (C<name>, up to 16
C<hosts> each with C<host>, C<ssl_port>, C<http_port> and its PEM C<certificate>, whose SHA-1
is the pin; C<bundle_location>, C<region>, C<protocols>, C<signing_keys>), dying with a
L<Converge::Error> of kind C<bundle> on anything else. C<offers_extended> is true when the
bundle lists C<converge-answer/1> and carries its Ed25519 signing keys.

=cut
