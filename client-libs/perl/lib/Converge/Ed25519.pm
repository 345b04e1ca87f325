package Converge::Ed25519;
use strict;
use warnings;
use Exporter 'import';

our $VERSION   = '0.1.0';
our @EXPORT_OK = qw(weak_key);

use constant KEY_BYTES => 32;

# The y coordinates of the eight points of small order (orders 1, 2, 4 and 8), 32 bytes
# little-endian with bit 255 (the sign of x) clear: 0, 1, p - 1, y8 and p - y8.
my %SMALL_ORDER_Y = map { pack('H64', $_) => 1 } qw(
    0000000000000000000000000000000000000000000000000000000000000000
    0100000000000000000000000000000000000000000000000000000000000000
    ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f
    26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05
    c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a
);

# Why the raw Ed25519 public key (a byte string) must not be trusted, or undef when it is sound.
sub weak_key {
    my ($raw) = @_;
    return 'an Ed25519 public key has 32 bytes' unless defined $raw && length $raw == KEY_BYTES;
    my $y = substr($raw, 0, 31) . chr(ord(substr $raw, 31) & 0x7f);
    # y >= p = 2^255 - 19: top byte 0x7f, bytes 1..30 all 0xff, the lowest at least 0xed
    return 'an Ed25519 public key not in canonical form'
        if substr($y, 31) eq "\x7f" && substr($y, 1, 30) eq "\xff" x 30 && ord($y) >= 0xed;
    return 'an Ed25519 public key of small order' if $SMALL_ORDER_Y{$y};
    return undef;
}

1;

__END__

=head1 NAME

Converge::Ed25519 - the weak-key rule for a bundle's Ed25519 public keys

=head1 SYNOPSIS

    use Converge::Ed25519 qw(weak_key);
    my $why = weak_key($raw);    # undef, or why the 32-byte key must not be trusted

=head1 DESCRIPTION

A bundle's Ed25519 keys (its signing keys, the transparency log's key and the witnesses' keys)
are checked when the bundle is read: C<weak_key> returns a reason for a key of small order
(its y coordinate, the sign bit cleared, is 0, 1, p - 1, y8 or p - y8) or a key not in
canonical form (y encoded at or above p = 2^255 - 19), and undef otherwise. The rule is plain
byte comparison, the same in every client library; under a key of small order some Ed25519
libraries accept C<R = identity, S = 0> as a signature of any message, so no client relies on
its library to refuse such keys later. Keys off the curve are not refused here.
L<Converge::Bundle> turns a reason into a L<Converge::Error> of kind C<bundle>.

=cut
