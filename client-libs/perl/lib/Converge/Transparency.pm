package Converge::Transparency;
use strict;
use warnings;
use Crypt::PK::Ed25519 ();
use Digest::SHA ();
use Encode ();
use MIME::Base64 ();
use Converge::Ed25519 qw(weak_key);
use Converge::Error;
use Converge::JSON qw(verified_object is_object json_int json_string);

our $VERSION = '0.1.0';

# The notary's transparency log, client side (docs/transparency.md, "Clients"): the bundle's
# transparency member, RFC 6962 hashing with RFC 9162 proof verification, signed-note
# checkpoints (c2sp.org/signed-note, tlog-checkpoint, tlog-cosignature; Ed25519 by CryptX) and
# the six checks of an answer's member, each failure a Converge::Extended::Rejected of the kind
# log-missing, log-proof, log-checkpoint, log-witness or log-entry. Pure: no IO.

use constant MAX_PROOF           => 63;
use constant MAX_NOTE            => 65536;
use constant MAX_SIGNATURE_LINES => 100;
use constant MAX_WITNESSES       => 32;
use constant ENTRY_TYPE          => 'converge-observation/1';
my $SIG_PREFIX = "\x{2014} ";

sub _reject {    # the rejection class lives with the answer checks
    require Converge::Extended;
    die Converge::Extended::Rejected->new($_[0], $_[1]);
}

sub _b64 {    # standard padded base64 of a string, or undef
    my ($t) = @_;
    return undef if !defined json_string($t) || length($t) % 4
        || $t !~ m{\A[A-Za-z0-9+/]*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\z};
    return MIME::Base64::decode_base64($t);
}

sub _valid_name { my ($n) = @_; defined $n && length $n && $n !~ /[\s+\p{C}]/ }

# A signed-note verifier key <name>+<8 hex key id>+<base64(type || 32-byte key)> (a character
# string): { name, id, pub }; dies with a message.
sub parse_vkey {
    my ($text, $type) = @_;
    die "a verifier key is a short string\n" unless defined json_string($text) && length $text <= 1024;
    my ($name, $hex, $b64) = split /\+/, $text, 3;
    die "not <name>+<8 hex>+<base64 key>\n" unless defined $b64 && _valid_name($name) && $hex =~ /\A[0-9a-f]{8}\z/;
    my $raw = _b64($b64);
    die sprintf("not a type 0x%02x Ed25519 key\n", $type) unless defined $raw && length $raw == 33 && ord($raw) == $type;
    if (defined(my $weak = weak_key(substr $raw, 1))) { die "$weak\n" }
    my $nb = Encode::encode('UTF-8', $name);
    my $id = substr Digest::SHA::sha256("$nb\n$raw"), 0, 4;
    die "the key id does not match the key\n" unless unpack('H8', $id) eq $hex;
    return { name => $name, id => $id, pub => substr($raw, 1) };
}

# The bundle's transparency member: { log, url, witnesses, min }; dies with a Converge::Error of
# kind bundle.
sub parse_policy {
    my ($obj) = @_;
    my $bad = sub { Converge::Error->throw('bundle', $_[0]) };
    $bad->('transparency must be an object') unless is_object($obj);
    my @unknown = grep { !/\A(?:log|url|witnesses|min_cosignatures)\z/ } sort keys %$obj;
    $bad->('unknown transparency fields: ' . join(', ', @unknown)) if @unknown;
    my $log = eval { parse_vkey($obj->{log}, 0x01) } or $bad->("transparency log key: $@");
    my $url = $obj->{url};
    $bad->('transparency url must be an https:// URL')
        if defined $url && (!defined json_string($url) || $url !~ m{\Ahttps://} || length $url > 2048);
    my $ws = exists $obj->{witnesses} ? $obj->{witnesses} : [];
    $bad->('transparency witnesses must be a list of at most ' . MAX_WITNESSES) unless ref $ws eq 'ARRAY' && @$ws <= MAX_WITNESSES;
    my (@witnesses, %seen);
    for my $w (@$ws) {
        $bad->('a witness is an object with name and vkey') unless is_object($w) && join(',', sort keys %$w) eq 'name,vkey';
        my $k = eval { parse_vkey($w->{vkey}, 0x04) } or $bad->("witness key: $@");
        $bad->("witness name is not its key's name") unless (json_string($w->{name}) // "\0") eq $k->{name};
        $bad->('a witness is listed twice') if $seen{"$k->{name}\n$k->{id}"}++;
        push @witnesses, $k;
    }
    # One key under two names: a cosignature does not sign the witness's name, so one key would
    # count as two witnesses (or the log would cosign its own checkpoints).
    my %raw;
    $bad->('transparency names one key twice (two witnesses, or a witness and the log)')
        if grep { $raw{ $_->{pub} }++ } $log, @witnesses;
    my $need = exists $obj->{min_cosignatures} ? json_int($obj->{min_cosignatures}) : 0;
    $bad->('min_cosignatures must be an integer from 0 to ' . scalar @witnesses)
        unless defined $need && $need >= 0 && $need <= @witnesses;
    return { log => $log, url => $url, witnesses => \@witnesses, min => $need };
}

sub leaf_hash { Digest::SHA::sha256("\x00" . $_[0]) }
sub _node     { Digest::SHA::sha256("\x01" . $_[0] . $_[1]) }

# RFC 6962 2.1: the root of the leaf hashes.
sub tree_root {
    my @l = @_;
    return Digest::SHA::sha256('') unless @l;
    return $l[0] if @l == 1;
    my $k = 1;
    $k *= 2 while $k * 2 < @l;
    return _node(tree_root(@l[0 .. $k - 1]), tree_root(@l[$k .. $#l]));
}

# RFC 9162 2.1.3.2: whether the proof puts leaf at index in the tree of size with root.
sub verify_inclusion {
    my ($leaf, $index, $size, $proof, $root) = @_;
    return 0 unless $index >= 0 && $index < $size && !grep { length $_ != 32 } @$proof;
    my ($fn, $sn, $r) = ($index, $size - 1, $leaf);
    for my $p (@$proof) {
        return 0 if $sn == 0;
        if (($fn & 1) || $fn == $sn) {
            $r = _node($p, $r);
            while (!($fn & 1) && $fn) { $fn >>= 1; $sn >>= 1 }
        } else {
            $r = _node($r, $p);
        }
        $fn >>= 1;
        $sn >>= 1;
    }
    return $sn == 0 && $r eq $root ? 1 : 0;
}

# RFC 9162 2.1.4.2: whether the proof shows tree old a prefix of tree new.
sub verify_consistency {
    my ($old, $new, $old_root, $new_root, $proof) = @_;
    return 0 unless $old >= 0 && $old <= $new && !grep { length $_ != 32 } @$proof;
    return (!@$proof && ($old != $new || $old_root eq $new_root)) ? 1 : 0 if $old == $new || $old == 0;
    my @path = ($old & ($old - 1)) == 0 ? ($old_root, @$proof) : @$proof;
    return 0 unless @path;
    my ($fn, $sn) = ($old - 1, $new - 1);
    while ($fn & 1) { $fn >>= 1; $sn >>= 1 }
    my ($fr, $sr) = ($path[0], $path[0]);
    for my $c (@path[1 .. $#path]) {
        return 0 if $sn == 0;
        if (($fn & 1) || $fn == $sn) {
            ($fr, $sr) = (_node($c, $fr), _node($c, $sr));
            while (!($fn & 1) && $fn) { $fn >>= 1; $sn >>= 1 }
        } else {
            $sr = _node($sr, $c);
        }
        $fn >>= 1;
        $sn >>= 1;
    }
    return $sn == 0 && $fr eq $old_root && $sr eq $new_root ? 1 : 0;
}

sub _ed25519 {
    my ($pub, $sig, $msg) = @_;
    return length $sig == 64 && eval { Crypt::PK::Ed25519->new->import_key_raw($pub, 'public')->verify_message($sig, $msg) } ? 1 : 0;
}

# 1 when the key signed (its first line verifies), 0 without a line, -1 when it fails.
sub _signed_by {
    my ($key, $sigs, $text, $cosig) = @_;
    for my $s (@$sigs) {
        my ($name, $raw) = @$s;
        next unless $name eq $key->{name} && substr($raw, 0, 4) eq $key->{id};
        my $sig = substr $raw, 4;
        return _ed25519($key->{pub}, $sig, $text) ? 1 : -1 unless $cosig;
        return -1 unless length $sig == 72;
        my $t = unpack 'Q>', substr($sig, 0, 8);
        return _ed25519($key->{pub}, substr($sig, 8), "cosignature/v1\ntime $t\n$text") ? 1 : -1;
    }
    return 0;
}

# Steps 3 and 4: the checkpoint (a character string) signed by the log and cosigned by enough
# witnesses: { size, root, cosigned }; dies with a Converge::Extended::Rejected.
sub open_checkpoint {
    my ($note, $policy) = @_;
    my $bad = sub { _reject('log-checkpoint', "checkpoint: $_[0]") };
    $bad->('not a note') unless defined json_string($note);
    my $bytes = Encode::encode('UTF-8', $note);
    $bad->('larger than ' . MAX_NOTE . ' bytes') if length $bytes > MAX_NOTE;
    $bad->('control character in the note') if $note =~ /[\x00-\x09\x0b-\x1f\x7f-\x9f]/;
    my $cut = rindex $note, "\n\n";
    $bad->('not a signed note') unless $cut >= 0 && $note =~ /\n\z/;
    my $text = substr $note, 0, $cut + 1;
    my @lines = split /\n/, substr($note, $cut + 2, length($note) - $cut - 3), -1;
    @lines = ('') unless @lines;
    $bad->('too many signature lines') if @lines > MAX_SIGNATURE_LINES;
    my @sigs;
    for my $line (@lines) {
        my ($name, $b64) = $line =~ /\A\Q$SIG_PREFIX\E([^ ]*) (.*)\z/s;
        $bad->('malformed signature line') unless defined $b64 && _valid_name($name);
        my $raw = _b64($b64);
        $bad->('a signature is not base64 of a key id and a signature') unless defined $raw && length $raw >= 5;
        push @sigs, [$name, $raw];
    }
    my @tl = split /\n/, substr($text, 0, -1), -1;
    $bad->('a checkpoint has origin, size and root lines') if @tl < 3 || grep { $_ eq '' } @tl;
    $bad->('size is not a decimal without leading zeros') unless $tl[1] =~ /\A(?:0|[1-9][0-9]{0,17})\z/;
    my $root = _b64($tl[2]);
    $bad->('root is not 32 bytes') unless defined $root && length $root == 32;
    $bad->("origin is not the log's name") unless $tl[0] eq $policy->{log}{name};
    my $tb = Encode::encode('UTF-8', $text);
    my $r = _signed_by($policy->{log}, \@sigs, $tb, 0);
    $bad->($r < 0 ? "the log's signature does not verify" : "no signature by the log's key") unless $r == 1;
    my $cosigned = 0;
    for my $w (@{ $policy->{witnesses} }) {
        $r = _signed_by($w, \@sigs, $tb, 1);
        _reject('log-witness', "checkpoint: the cosignature of $w->{name} does not verify") if $r < 0;
        $cosigned += $r;
    }
    _reject('log-witness', "checkpoint cosigned by $cosigned of the bundle's witnesses, $policy->{min} required")
        if $cosigned < $policy->{min};
    return { size => 0 + $tl[1], root => $root, cosigned => $cosigned };
}

sub _same {    # one JSON type and value (absent is null)
    my ($a, $b) = @_;
    return !defined $b if !defined $a;
    return 0 if !defined $b || ref $a || ref $b;
    return defined json_int($a) ? (defined json_int($b) && $a == $b) : (defined json_string($a) && defined json_string($b) && $a eq $b);
}

# The six checks of an answer's member (its raw bytes, undef when absent) for the statement's
# target (a hash) and the fingerprint asked about; returns the checkpoint with index, or dies
# with a Converge::Extended::Rejected of a log-* kind.
sub check_member {
    my ($member, $policy, $target, $fp) = @_;
    _reject('log-missing', 'the answer carries no proof of inclusion in the log') unless defined $member;
    my $obj = verified_object($member);
    my $index = $obj && json_int($obj->{index});
    my $proof = $obj && $obj->{proof};
    _reject('log-proof', 'transparency member lacks checkpoint, entry, index or proof')
        unless $obj && defined json_string($obj->{checkpoint}) && defined json_string($obj->{entry}) && defined $index
        && $index >= 0 && ref $proof eq 'ARRAY' && @$proof <= MAX_PROOF && !grep { !defined json_string($_) } @$proof;
    my $ck = open_checkpoint($obj->{checkpoint}, $policy);
    my $raw = _b64($obj->{entry});
    my $entry = defined $raw ? verified_object($raw) : undef;
    _reject('log-entry', 'the logged entry is not base64 of a ' . ENTRY_TYPE . ' object')
        unless $entry && (json_string($entry->{type}) // '') eq ENTRY_TYPE;
    for my $k (qw(host port ip)) {
        _reject('log-entry', "the logged entry's $k is not the statement's")
            unless _same($entry->{$k}, is_object($target) ? $target->{$k} : undef);
    }
    _reject('log-entry', 'the logged entry is about another certificate')
        unless (json_string($entry->{ $fp->algorithm }) // '') eq $fp->colon_hex;
    my @hashes = map { _b64($_) } @$proof;
    _reject('log-proof', 'inclusion proof: a hash is not 32 bytes in base64') if grep { !defined $_ || length $_ != 32 } @hashes;
    _reject('log-proof', "inclusion proof does not put the entry at $index in the tree of $ck->{size}")
        unless verify_inclusion(leaf_hash($raw), $index, $ck->{size}, \@hashes, $ck->{root});
    return { %$ck, index => $index };
}

1;

__END__

=head1 NAME

Converge::Transparency - the notary's transparency log, client side

=head1 DESCRIPTION

C<parse_policy> reads a bundle's C<transparency> member (dies with a C<bundle> error);
C<check_member($member, $policy, $target, $fingerprint)> checks an answer's member in the six
documented steps and dies with a C<Converge::Extended::Rejected> of kind C<log-missing>,
C<log-proof>, C<log-checkpoint>, C<log-witness> or C<log-entry>; C<open_checkpoint>,
C<verify_inclusion>, C<verify_consistency>, C<tree_root> and C<leaf_hash> are the parts.

=cut
