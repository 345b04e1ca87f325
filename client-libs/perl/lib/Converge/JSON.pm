package Converge::JSON;
use strict;
use warnings;
use B ();
use JSON::XS ();
use Exporter 'import';

our $VERSION = '0.1.0';
our @EXPORT_OK = qw(parse_json verified_object within_bounds is_object is_bool json_int json_number json_string);

use constant MAX_DEPTH        => 32;
use constant MAX_SAFE_INTEGER => 9007199254740991;

# JSON through the stock parser, JSON::XS, in its strict default mode: UTF-8 checked, no
# comments, NaN, trailing commas, non-string member names or undefined escapes; the last of
# repeated member names counts. Objects are plain hashes. What a notary signed is
# bounds-scanned before it is parsed (docs/wire-format.md, "The bounds scan").

my $XS = JSON::XS->new->utf8->allow_nonref->max_depth(512);

# ($value, $ok): the value of strict JSON text (bytes), or (undef, 0).
sub parse_json {
    my ($bytes) = @_;
    return (undef, 0) unless defined $bytes && utf8::downgrade($bytes, 1);
    my $v = eval { $XS->decode($bytes) };
    return $@ ? (undef, 0) : ($v, 1);
}

# The bounds scan over verified bytes: outside strings at most MAX_DEPTH levels of [ and {
# open at once, and every number token an integer of at most 15 digits.
sub within_bounds {
    my ($t) = @_;
    my $depth = 0;
    pos($t) = 0;
    while (1) {
        $t =~ /\G[^"\[\]{}\-0-9]+/gc;
        last if pos($t) >= length $t;
        if ($t =~ /\G"/gc) {
            1 while $t =~ /\G[^"\\]*\\./gcs;    # runs ending in an escape (a backslash escapes the byte after it)
            $t =~ /\G[^"\\]*"?/gc;
        } elsif ($t =~ /\G[\[{]/gc) {
            return 0 if ++$depth > MAX_DEPTH;
        } elsif ($t =~ /\G[\]}]/gc) {
            $depth--;
        } else {
            $t =~ /\G([\-+.0-9eE]+)/gc;
            return 0 unless $1 =~ /\A-?(?:0|[1-9][0-9]{0,14})\z/;
        }
    }
    return 1;
}

# Verified bytes as a JSON object (a hash): the bounds scan, then the stock parser; undef when
# either refuses.
sub verified_object {
    my ($bytes) = @_;
    return undef unless within_bounds($bytes);
    my ($v, $ok) = parse_json($bytes);
    return $ok && ref $v eq 'HASH' ? $v : undef;
}

sub is_object { ref $_[0] eq 'HASH' }
sub is_bool   { JSON::XS::is_bool($_[0]) }

sub _flags { B::svref_2object(\$_[0])->FLAGS }

# The value of a number JSON::XS read as an integer (not a float, string or boolean), else undef.
sub json_int {
    my ($v) = @_;
    return undef if !defined $v || ref $v;
    my $f = _flags($v);
    return ($f & B::SVp_IOK) && !($f & (B::SVp_NOK | B::SVp_POK)) ? $v : undef;
}

# The value of a JSON string (not a number, boolean, null, array or object), else undef.
sub json_string {
    my ($v) = @_;
    return undef if !defined $v || ref $v;
    return (_flags($v) & (B::SVp_IOK | B::SVp_NOK)) ? undef : $v;
}

# The value of a number (integer or float), else undef.
sub json_number {
    my ($v) = @_;
    return undef if !defined $v || ref $v;
    my $f = _flags($v);
    return ($f & (B::SVp_IOK | B::SVp_NOK)) && !($f & B::SVp_POK) ? 0 + $v : undef;
}

1;

__END__

=head1 NAME

Converge::JSON - strict JSON through JSON::XS, and the bounds scan

=head1 DESCRIPTION

C<parse_json($bytes)> returns C<($value, $ok)>: JSON::XS in its strict mode (objects are
hashes, the last of repeated names counts, at most 512 levels). C<within_bounds($bytes)> is the
bounds scan of docs/wire-format.md (32 open levels, integers of at most 15 digits);
C<verified_object($bytes)> is both, for bytes whose signature was checked. C<json_int> and
C<json_number> and C<json_string> tell what JSON::XS read apart (numbers, strings, booleans).

=cut
