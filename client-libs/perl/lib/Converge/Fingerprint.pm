package Converge::Fingerprint;
use strict;
use warnings;
use Digest::SHA ();
use Converge::Error;
use overload '""' => sub { $_[0]->colon_hex }, fallback => 1;

our $VERSION = '0.1.0';
use constant MAX_TEXT => 200;

# A certificate digest with its algorithm ("sha1" or "sha256").
sub new { my ($c, $alg, $digest) = @_; bless { algorithm => $alg, digest => $digest }, $c }

sub algorithm { $_[0]{algorithm} }
sub digest    { $_[0]{digest} }

# The canonical form: upper-case hex, a colon between bytes.
sub colon_hex { join ':', unpack('(A2)*', uc unpack('H*', $_[0]{digest})) }

sub equals {
    my ($a, $b) = @_;
    return $a->{algorithm} eq $b->{algorithm} && $a->{digest} eq $b->{digest};
}

# The fingerprint of a DER certificate.
sub of {
    my ($class, $der, $alg) = @_;
    $alg //= 'sha1';
    return $class->new($alg, $alg eq 'sha256' ? Digest::SHA::sha256($der) : Digest::SHA::sha1($der));
}

sub _bad { Converge::Error->throw('fingerprint', $_[0]) }

# Parses 40 (SHA-1) or 64 (SHA-256) hex digits in any case, with no separators or a colon
# between every pair; surrounding spaces, tabs, CR and LF are ignored.
sub parse {
    my ($class, $text) = @_;
    _bad('a fingerprint is a string') if !defined $text || ref $text;
    _bad('fingerprint longer than ' . MAX_TEXT . ' characters') if length $text > MAX_TEXT;
    (my $s = $text) =~ s/\A[ \t\r\n]+|[ \t\r\n]+\z//g;
    _bad('empty fingerprint') if $s eq '';
    my $digits;
    if (index($s, ':') >= 0) {
        for my $g (split /:/, $s, -1) {
            _bad('colon-separated fingerprints need two hex digits per byte') unless $g =~ /\A[0-9A-Fa-f]{2}\z/;
        }
        ($digits = $s) =~ s/://g;
    } else {
        _bad('fingerprint contains a non-hex character') unless $s =~ /\A[0-9A-Fa-f]*\z/;
        _bad('odd number of hex digits') if length($s) % 2;
        $digits = $s;
    }
    my $digest = pack 'H*', $digits;
    return $class->new('sha1', $digest)   if length $digest == 20;
    return $class->new('sha256', $digest) if length $digest == 32;
    _bad('a fingerprint has 20 (SHA-1) or 32 (SHA-256) bytes, not ' . length $digest);
}

1;

__END__

=head1 NAME

Converge::Fingerprint - a certificate digest (SHA-1 or SHA-256)

=head1 SYNOPSIS

    my $fp = Converge::Fingerprint->parse('ab:cd:...');    # 40 or 64 hex digits, colons optional
    my $fp = Converge::Fingerprint->of($der, 'sha256');
    print $fp->colon_hex, ' ', $fp->algorithm;

=head1 DESCRIPTION

C<parse> accepts 40 (SHA-1) or 64 (SHA-256) hex digits in any case, either bare or with a
colon between every pair, surrounding whitespace ignored, and dies with a
L<Converge::Error> of kind C<fingerprint> otherwise. C<colon_hex> is the canonical form
(upper case, colons), C<equals> compares algorithm and digest.

=cut
