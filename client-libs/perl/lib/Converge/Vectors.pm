package Converge::Vectors;
use strict;
use warnings;
use File::Temp ();
use File::Path ();
use File::Basename ();
use JSON::XS ();
use MIME::Base64 ();
use Converge::Error;
use Converge::Fingerprint;
use Converge::Policy;
use Converge::Bundle;
use Converge::Config;
use Converge::Legacy;
use Converge::Extended;
use Converge::Transparency;
use Converge::JSON qw(parse_json);

our $VERSION = '0.1.0';

# The shared test vectors through this library: run_case computes this implementation's output
# for one case, in the fields CLIENT-CLI.md names.

our @SCHEMAS = map { "converge-vectors/$_/1" } qw(fingerprints requests legacy-signatures notary-responses bundles
    consensus cache extended-answers config transparency);
our @COMPARED = qw(result error kind algorithm canonical request signed_bytes name version
    hosts verdict extended enabled);

# The fields compared for a case: @COMPARED, and the outputs of the transparency case types (a
# tree's root, a checkpoint's size and root; inputs of the other types).
sub compared {
    my ($c) = @_;
    my $t = $c->{type} // '';
    return (@COMPARED, $t eq 'tree' ? ('root') : $t eq 'checkpoint' ? ('size', 'root') : ());
}

sub _hashes {    # a list of base64 hashes of 32 bytes, or undef
    my ($list) = @_;
    return undef unless ref $list eq 'ARRAY';
    my @out = map { Converge::Bundle::strict_base64($_) } @$list;
    return (grep { !defined $_ || length $_ != 32 } @out) ? undef : \@out;
}

# converge-vectors/transparency/1: tree, inclusion, consistency, checkpoint, answer.
sub _transparency {
    my ($doc, $c) = @_;
    my $t = $c->{type} // '';
    my $rejected = sub {
        my ($e, $word) = @_;
        die $e unless ref $e eq 'Converge::Extended::Rejected';
        return { result => $word, kind => $e->reason };
    };
    if ($t eq 'tree') {
        my @leaves = map { Converge::Transparency::leaf_hash(MIME::Base64::decode_base64($_)) } @{ $doc->{entries} }[0 .. $c->{size} - 1];
        return { result => 'valid', root => MIME::Base64::encode_base64(Converge::Transparency::tree_root(@leaves), '') };
    }
    if ($t eq 'inclusion' || $t eq 'consistency') {
        my $incl = $t eq 'inclusion';
        my $h = _hashes($incl ? [ $c->{leaf}, $c->{root} ] : [ $c->{old_root}, $c->{new_root} ]);
        my $p = _hashes($c->{proof});
        my $ok = $h && $p && ($incl
            ? Converge::Transparency::verify_inclusion($h->[0], $c->{index}, $c->{size}, $p, $h->[1])
            : Converge::Transparency::verify_consistency($c->{old_size}, $c->{new_size}, $h->[0], $h->[1], $p));
        return { result => $ok ? 'valid' : 'invalid' };
    }
    if ($t eq 'checkpoint') {
        my $policy = { log => Converge::Transparency::parse_vkey($c->{log}, 0x01),
            witnesses => [ map { Converge::Transparency::parse_vkey($_, 0x04) } @{ $c->{witnesses} } ], min => $c->{min_cosignatures} };
        my $ck = eval { Converge::Transparency::open_checkpoint($c->{checkpoint}, $policy) };
        return $rejected->($@, 'invalid') unless $ck;
        return { result => 'valid', size => $ck->{size}, root => MIME::Base64::encode_base64($ck->{root}, '') };
    }
    if ($t eq 'answer') {
        my $exp = $c->{expect};
        my $fp = Converge::Fingerprint->parse($exp->{sha256} // $exp->{sha1});
        my $member = defined $c->{transparency} ? JSON::XS->new->utf8->allow_nonref->encode($c->{transparency}) : undef;
        my $policy = Converge::Transparency::parse_policy($c->{bundle});
        my $target = { host => $exp->{host}, port => $exp->{port}, ip => $exp->{ip} };
        return { result => 'valid' } if eval { Converge::Transparency::check_member($member, $policy, $target, $fp); 1 };
        return $rejected->($@, 'rejected');
    }
    die "unknown transparency case type $t\n";
}

sub _bytes {
    my ($c, $name) = @_;
    return pack('H*', $c->{"${name}_hex"}) if defined $c->{"${name}_hex"} && !ref $c->{"${name}_hex"};
    die "case has no $name\n" unless defined $c->{$name} && !ref $c->{$name};
    my $b = $c->{$name};
    utf8::encode($b);
    return $b;
}

sub _text { my $b = $_[0]; return undef unless defined $b; utf8::decode($b); $b }

sub _certificate {
    my ($doc, $name) = @_;
    return Converge::Bundle::der_of_pem($doc->{certificates}{$name} // '') // die "certificate $name missing\n";
}

# This implementation's output for one case ($doc: the whole vector file, decoded by JSON::XS).
sub run_case {
    my ($doc, $c) = @_;
    my %out = (id => $c->{id});
    my $schema = $doc->{schema} // '';
    my $r = eval {
        if ($schema eq 'converge-vectors/fingerprints/1') {
            my $fp = Converge::Fingerprint->parse($c->{input});
            return { result => 'valid', algorithm => $fp->algorithm, canonical => $fp->colon_hex };
        }
        if ($schema eq 'converge-vectors/requests/1') {
            my $fp = Converge::Fingerprint->parse($c->{fingerprint});
            return { result => 'valid', request => _text(Converge::Legacy::request_bytes($c->{host}, $c->{port}, $fp, $c->{ip})) };
        }
        if ($schema eq 'converge-vectors/legacy-signatures/1') {
            my ($signed) = Converge::Legacy::split_signed_body(_bytes($c, 'body'));
            Converge::Legacy::read_signed_body(_bytes($c, 'body'), _certificate($doc, $c->{certificate}));
            return { result => 'valid', signed_bytes => _text($signed) };
        }
        if ($schema eq 'converge-vectors/notary-responses/1') {
            my @wanted = map { Converge::Fingerprint->parse($_) } @{ $c->{fingerprints} // [] };
            my ($o) = Converge::Legacy::outcome_from_http(_bytes($c, 'raw'), \@wanted, _certificate($doc, $c->{certificate}));
            return { result => $o->vote, kind => $o->kind };
        }
        if ($schema eq 'converge-vectors/bundles/1') {
            my $b = Converge::Bundle->parse(_bytes($c, 'bundle'));
            return { result => 'valid', name => $b->name, version => $b->version, hosts => [ map {
                { host => $_->host, ssl_port => 0 + $_->ssl_port, http_port => 0 + $_->http_port, pin => $_->pin->colon_hex }
            } $b->hosts ] };
        }
        if ($schema eq 'converge-vectors/consensus/1') {
            my $policy = Converge::Policy::parse($c->{policy});
            my $aside = JSON::XS::is_bool($c->{stand_aside}) && $c->{stand_aside} ? 1 : 0;
            my $pending = $c->{pending} // 0;
            my $word = sub { $_[0] ? 'trusted' : 'untrusted' };
            if ($pending > 0) {
                my $v = Converge::Policy::settled($policy, $c->{votes} // [], $pending, $aside);
                return { result => defined $v ? $word->($v) : 'unsettled' };
            }
            return { result => $word->(Converge::Policy::decide($policy, $c->{votes} // [], $aside)) };
        }
        if ($schema eq 'converge-vectors/cache/1') {
            return { result => Converge::Policy::cache_decision($c->{timestamp}, $c->{now}, $c->{lifetime}) };
        }
        return _extended($doc, $c) if $schema eq 'converge-vectors/extended-answers/1';
        return { result => 'valid', enabled => _config($c) } if $schema eq 'converge-vectors/config/1';
        return _transparency($doc, $c) if $schema eq 'converge-vectors/transparency/1';
        die "unknown vector schema $schema\n";
    };
    if (my $e = $@) {
        die $e unless Converge::Error->caught($e);
        return { %out, result => 'invalid', error => $e->kind };
    }
    return { %out, %$r };
}

sub _config {
    my ($c) = @_;
    my $root = File::Temp::tempdir('converge-vector-XXXXXX', TMPDIR => 1, CLEANUP => 0);
    my $names = eval {
        while (my ($rel, $text) = each %{ $c->{files} // {} }) {
            File::Path::make_path(File::Basename::dirname("$root/$rel"));
            open(my $fh, '>:raw', "$root/$rel") or die "$root/$rel: $!";
            my $b = $text;
            utf8::encode($b);
            print $fh $b;
            close $fh;
        }
        while (my ($rel, $target) = each %{ $c->{links} // {} }) {
            File::Path::make_path(File::Basename::dirname("$root/$rel"));
            symlink($target, "$root/$rel") or die "$root/$rel: $!";
        }
        [ sort map { $_->name } Converge::Config->load($root, {})->notaries ];
    };
    my $e = $@;
    File::Path::remove_tree($root);
    die $e if $e;
    return $names;
}

sub _extended {
    my ($doc, $c) = @_;
    my $type = $c->{type} // '';
    if ($type eq 'bundle') {
        my $b = eval { Converge::Bundle->parse(_bytes($c, 'bundle')) };
        if (my $e = $@) {
            die $e unless Converge::Error->caught($e);
            return { result => 'invalid', kind => $e->kind };
        }
        return { result => 'valid', extended => $b->offers_extended ? JSON::XS::true : JSON::XS::false };
    }
    if ($type eq 'answer') {
        my $exp = $c->{expect} // {};
        my @entries = map { $doc->{signing_keys}{$_} } @{ $c->{bundle_keys} // [] };
        my ($parsed) = parse_json(JSON::XS->new->utf8->encode(\@entries));
        my $keys = Converge::Bundle::parse_signing_keys($parsed);
        my $now = $exp->{now} // 0;
        my %e = (host => $exp->{host} // '', port => $exp->{port}, nonce => $exp->{nonce} // '', now => $now,
            max_skew => $exp->{max_skew} // Converge::Extended::DEFAULT_MAX_SKEW, bind_ip => exists $exp->{ip}, ip => $exp->{ip} // '');
        $e{fingerprint} = Converge::Fingerprint->parse($exp->{fingerprint}) if defined $exp->{fingerprint} && !ref $exp->{fingerprint};
        my $v = eval { Converge::Extended::verify_answer(_bytes($c, 'answer'), Converge::Extended::trusted_keys($keys, $now), \%e) };
        if (my $r = $@) {
            die $r unless ref $r eq 'Converge::Extended::Rejected';
            return { result => 'rejected', kind => $r->reason };
        }
        return { result => 'valid', verdict => $v->{verdict} };
    }
    die "unknown case type $type\n";
}

1;

__END__

=head1 NAME

Converge::Vectors - the shared test vectors through this library

=head1 DESCRIPTION

C<run_case($doc, $case)> computes this implementation's output for one case of a vector file
of C<client-libs/vectors/>, in the fields the conformance runner compares.

=cut
