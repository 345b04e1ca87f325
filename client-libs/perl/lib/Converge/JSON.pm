package Converge::JSON;
use strict;
use warnings;
no warnings 'recursion';
use JSON::XS ();
use POSIX ();
use Exporter 'import';

our $VERSION = '0.1.0';
our @EXPORT_OK = qw(parse_json is_object is_bool json_int json_number py_dumps canonical float_repr);

use constant MAX_DEPTH           => 512;
use constant MAX_SAFE_INTEGER    => 9007199254740991;
use constant MAX_CANONICAL_DEPTH => 16;

# JSON at the protocol's edges, read the way the Python reference client reads it. Parsing is
# JSON::XS. Perl's hashes lose what two protocol rules need: key order and whether a number was
# written as an integer or a float (443 and 443.0), and JSON::XS refuses Python's NaN and
# Infinity. So a lexical pass over the bytes (tokens only; no values built) first marks every
# key with its position and every string with a prefix, and turns every number into a marked
# string holding its literal; JSON::XS then parses (UTF-8 and depth checked), and the tree is
# rebuilt with Converge::JSON::Object (keys in order: first position, last value, as Python's
# dict) and Converge::JSON::Number (the literal kept).

my $XS = JSON::XS->new->utf8->allow_nonref->max_depth(MAX_DEPTH);

sub _mark {
    my ($t) = @_;
    my ($out, $seq, $n) = ('', 0, length $t);
    pos($t) = 0;
    while (pos($t) < $n) {
        if ($t =~ /\G([^"\-0-9NI]+)/gc) {
            $out .= $1;
        } elsif ($t =~ /\G"/gc) {
            my $start = pos($t);
            my ($j, $end) = ($start, undef);
            while (1) {
                my $q = index($t, '"', $j);
                return undef if $q < 0;    # unterminated: not JSON
                my ($k, $bs) = ($q - 1, 0);
                while ($k >= $start && substr($t, $k, 1) eq '\\') { $bs++; $k-- }
                if ($bs % 2 == 0) { $end = $q; last }
                $j = $q + 1;
            }
            my $body = substr($t, $start, $end - $start);
            pos($t) = $end + 1;
            if ($t =~ /\G(?=[ \t\r\n]*:)/gc) {
                $out .= '"\u0002' . $seq++ . '\u0003' . $body . '"';
            } else {
                $out .= '"\u0000' . $body . '"';
            }
        } elsif ($t =~ /\G(-?Infinity|NaN|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)(?![0-9A-Za-z.+\-])/gc) {
            $out .= '"\u0001' . $1 . '"';
        } else {
            return undef;    # outside strings these characters only begin numbers: not JSON
        }
    }
    return $out;
}

sub _rebuild {
    my ($v) = @_;
    my $r = ref $v;
    if (!$r) {
        return undef unless defined $v;
        return Converge::JSON::Number->new(substr($v, 1)) if substr($v, 0, 1) eq "\x01";
        return substr($v, 1);
    }
    return [ map { _rebuild($_) } @$v ] if $r eq 'ARRAY';
    if ($r eq 'HASH') {
        my (@keys, %map);
        my %pos = map { /\A\x02(\d+)\x03/ ? ($_ => $1) : ($_ => 0) } keys %$v;
        for my $k (sort { $pos{$a} <=> $pos{$b} } keys %$v) {
            (my $name = $k) =~ s/\A\x02\d+\x03//;
            push @keys, $name unless exists $map{$name};
            $map{$name} = _rebuild($v->{$k});
        }
        return Converge::JSON::Object->new(\@keys, \%map);
    }
    return $v;    # a boolean
}

# Python's json.loads(bytes): the value, or undef with $ok false when the text is not JSON.
# Returns ($value, $ok).
sub parse_json {
    my ($bytes) = @_;
    return (undef, 0) unless defined $bytes;
    utf8::downgrade($bytes, 1) or return (undef, 0);
    my $marked = _mark($bytes);
    return (undef, 0) unless defined $marked;
    my $raw = eval { $XS->decode($marked) };
    return (undef, 0) if $@;
    return (_rebuild($raw), 1);
}

sub is_object { ref $_[0] && ref $_[0] eq 'Converge::JSON::Object' }
sub is_bool   { JSON::XS::is_bool($_[0]) }
sub is_number { ref $_[0] && ref $_[0] eq 'Converge::JSON::Number' }

# The integer a value was written as (an integer literal), else undef. Literals beyond 18
# digits come back as +-1e19, outside every range the protocol accepts.
sub json_int {
    my ($v) = @_;
    return undef unless is_number($v) && $v->{int};
    my $l = $v->{literal};
    return ($l =~ /^-/ ? -1e19 : 1e19) if length($l =~ s/^-//r) > 18;
    return 0 + $l;
}

# The value of a number (integer or float literal) as a double, else undef.
sub json_number {
    my ($v) = @_;
    return undef unless is_number($v);
    return $v->value;
}

# ------------------------------------------------------------------ Python json.dumps

sub _strtod {
    my ($s) = @_;
    return 9**9**9 if $s eq 'Infinity';
    return -9**9**9 if $s eq '-Infinity';
    return 9**9**9 / 9**9**9 if $s eq 'NaN';
    local $! = 0;
    my ($f) = POSIX::strtod($s);
    return $f;
}

# A float as Python's repr writes it: the shortest digits that read back, in Python's layout.
sub float_repr {
    my ($f) = @_;
    return 'NaN' if $f != $f;
    return $f > 0 ? 'Infinity' : '-Infinity' if $f == 9**9**9 || $f == -9**9**9;
    return (sprintf('%g', $f) =~ /^-/ ? '-0.0' : '0.0') if $f == 0;
    my $s;
    for my $p (1 .. 17) {
        $s = sprintf('%.*e', $p - 1, $f);
        last if _strtod($s) == $f;
    }
    my ($neg, $mant, $exp) = $s =~ /\A(-?)([0-9.]+)e([+-][0-9]+)\z/;
    (my $digits = $mant) =~ s/\.//;
    $digits =~ s/0+\z//;
    $digits = '0' if $digits eq '';
    $exp += 0;
    my $out;
    if ($exp >= -4 && $exp < 16) {
        if ($exp >= 0) {
            $out = length($digits) <= $exp + 1
                ? $digits . ('0' x ($exp + 1 - length $digits)) . '.0'
                : substr($digits, 0, $exp + 1) . '.' . substr($digits, $exp + 1);
        } else {
            $out = '0.' . ('0' x (-$exp - 1)) . $digits;
        }
    } else {
        my $m = length($digits) > 1 ? substr($digits, 0, 1) . '.' . substr($digits, 1) : $digits;
        $out = sprintf('%se%s%02d', $m, $exp < 0 ? '-' : '+', abs $exp);
    }
    return $neg . $out;
}

my %PY_ESC = ('"' => '\\"', '\\' => '\\\\', "\n" => '\\n', "\r" => '\\r', "\t" => '\\t', "\x08" => '\\b', "\x0c" => '\\f');

sub _py_string {
    my ($s) = @_;
    $s =~ s{([^\x20-\x7e]|["\\])}{
        my $c = $1;
        exists $PY_ESC{$c} ? $PY_ESC{$c}
          : ord($c) > 0xffff ? do { my $u = ord($c) - 0x10000; sprintf('\\u%04x\\u%04x', 0xd800 + ($u >> 10), 0xdc00 + ($u & 0x3ff)) }
          : sprintf('\\u%04x', ord $c)
    }ge;
    return qq{"$s"};
}

# $v serialised as Python's json.dumps($v) with default arguments (ASCII text).
sub py_dumps {
    my ($v) = @_;
    return 'null' unless defined $v;
    my $r = ref $v;
    return _py_string($v) unless $r;
    return $v ? 'true' : 'false' if JSON::XS::is_bool($v);
    if ($r eq 'Converge::JSON::Number') {
        return $v->{int} ? ($v->{literal} =~ s/\A-(0+)\z/0/r) : float_repr($v->value);
    }
    return '[' . join(', ', map { py_dumps($_) } @$v) . ']' if $r eq 'ARRAY';
    return '{' . join(', ', map { _py_string($_) . ': ' . py_dumps($v->get($_)) } $v->keys) . '}'
        if $r eq 'Converge::JSON::Object';
    die "not a JSON value: $r";
}

# ------------------------------------------------------------------ RFC 8785

my %C_ESC = ('"' => '\\"', '\\' => '\\\\', "\n" => '\\n', "\r" => '\\r', "\t" => '\\t', "\x08" => '\\b', "\x0c" => '\\f');

sub _canon_string {
    my ($s) = @_;
    $s =~ s{([\x00-\x1f"\\])}{ exists $C_ESC{$1} ? $C_ESC{$1} : sprintf('\\u%04x', ord $1) }ge;
    utf8::encode($s);
    return qq{"$s"};
}

# $v as RFC 8785 canonical JSON (UTF-8 bytes), for the subset the extended format uses: objects
# with ASCII keys, arrays, strings, booleans, null and integers of magnitude at most 2^53 - 1,
# nested at most 16 deep. undef when the value is outside the subset.
sub canonical {
    my ($v, $depth) = @_;
    $depth //= 0;
    return undef if $depth > MAX_CANONICAL_DEPTH;
    return 'null' unless defined $v;
    my $r = ref $v;
    return _canon_string($v) unless $r;
    return $v ? 'true' : 'false' if JSON::XS::is_bool($v);
    if ($r eq 'Converge::JSON::Number') {
        return undef unless $v->{int};
        my $l = $v->{literal};
        return undef if length($l =~ s/^-//r) > 16 || abs($l) > MAX_SAFE_INTEGER;
        return '' . (0 + $l);
    }
    if ($r eq 'ARRAY') {
        my @parts;
        for my $x (@$v) {
            my $c = canonical($x, $depth + 1);
            return undef unless defined $c;
            push @parts, $c;
        }
        return '[' . join(',', @parts) . ']';
    }
    if ($r eq 'Converge::JSON::Object') {
        my @parts;
        for my $k (sort $v->keys) {
            return undef if $k =~ /[^\x00-\x7f]/;
            my $c = canonical($v->get($k), $depth + 1);
            return undef unless defined $c;
            push @parts, _canon_string($k) . ':' . $c;
        }
        return '{' . join(',', @parts) . '}';
    }
    return undef;
}

package Converge::JSON::Object;
use strict;
use warnings;

# A JSON object: keys in their first position, each with its last value (as Python's dict).
sub new      { my ($c, $keys, $map) = @_; bless { keys => $keys // [], map => $map // {} }, $c }
sub keys     { @{ $_[0]{keys} } }
sub count    { scalar @{ $_[0]{keys} } }
sub has      { exists $_[0]{map}{ $_[1] } }
sub get      { $_[0]{map}{ $_[1] } }
sub without {
    my ($self, $k) = @_;
    my %m = %{ $self->{map} };
    delete $m{$k};
    return Converge::JSON::Object->new([ grep { $_ ne $k } $self->keys ], \%m);
}

package Converge::JSON::Number;
use strict;
use warnings;

# A number as written: the literal, whether it is an integer literal, its double value.
sub new {
    my ($c, $literal) = @_;
    return bless { literal => $literal, int => scalar($literal =~ /\A-?(?:0|[1-9][0-9]*)\z/) }, $c;
}
sub literal { $_[0]{literal} }
sub value   { Converge::JSON::_strtod($_[0]{literal}) }

1;

__END__

=head1 NAME

Converge::JSON - JSON read and written the way the protocol needs it

=head1 DESCRIPTION

C<parse_json($bytes)> returns C<($value, $ok)>: Python's C<json.loads> semantics (key order
kept, first position and last value for repeated keys, integer and float literals kept apart,
C<NaN> and C<Infinity> accepted, at most 512 levels). Objects are L<Converge::JSON::Object>
(C<keys>, C<get>, C<has>), numbers L<Converge::JSON::Number> (C<literal>, C<value>), booleans
JSON::XS booleans, null C<undef>.

C<py_dumps($value)> is Python's C<json.dumps> with default arguments (legacy recipe (a));
C<canonical($value)> is RFC 8785 over the extended format's subset (C<undef> outside it).

=cut
