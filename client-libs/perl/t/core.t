# The strict stock JSON parser and the bounds scan, fingerprints, framing, bundles,
# configuration, policies, weak Ed25519 keys, one transparency key named twice; a fixed-seed
# fuzz of the response parser.
use strict;
use warnings;
use utf8;
use Test::More;
use FindBin ();
use lib "$FindBin::RealBin/../lib";
use Crypt::PK::RSA ();
use MIME::Base64 ();
use Converge::JSON qw(parse_json within_bounds);
use Converge::Fingerprint;
use Converge::Legacy;
use Converge::Policy;
use Converge::Bundle;
use Converge::Config;
use Converge::Ed25519 qw(weak_key);
use Converge::Transparency;
use Digest::SHA ();
use Crypt::PK::Ed25519 ();

my $KEYS = "$FindBin::RealBin/../../vectors/keys";
sub slurp { open(my $fh, '<:raw', $_[0]) or die "$_[0]: $!"; local $/; <$fh> }

subtest 'JSON is the strict stock parser' => sub {
    my ($v, $ok) = parse_json('{"a": 1, "a": 2, "e": {}}');
    ok($ok);
    is($v->{a}, 2, 'the last of repeated names counts');
    for my $bad ('{', '[NaN]', '[1,]', '{1: 2}', '[1] // c', "[\"\xff\"]", '["\q"]', '[01]') {
        ok(!(parse_json($bad))[1], "refused: $bad");
    }
    ok(!(parse_json('[' x 600 . ']' x 600))[1], 'nesting beyond 512 is refused');
};

subtest 'the bounds scan' => sub {
    for my $t ('{"a": [1, -12, 0]}', '["[[[", "\\\\"]', '[' x 32 . ']' x 32, '[123456789012345]', '["1.5e999"]') {
        ok(within_bounds($t), "within: $t");
    }
    for my $t ('[' x 33 . ']' x 33, '[1234567890123456]', '[1.5]', '[1e2]', '[-0.0]', '[01]', '{"a": 1E5}') {
        ok(!within_bounds($t), "beyond: $t");
    }
};

subtest 'fingerprints' => sub {
    my $fp = Converge::Fingerprint->parse(" ab" . ('CD' x 19) . "\n");
    is($fp->algorithm, 'sha1');
    is($fp->colon_hex, 'AB:' . join(':', ('CD') x 19));
    for my $bad ('', 'zz', 'ABC', 'AB:CD', 'A' x 201, 'AB::CD' . ('CD' x 18)) {
        my $e = do { eval { Converge::Fingerprint->parse($bad) }; $@ };
        ok(Converge::Error->caught($e, 'fingerprint'), "refused: '" . substr($bad, 0, 12) . "'") or diag $e;
    }
};

subtest 'IP literals in the notary form' => sub {
    is(Converge::Legacy::check_ip('2001:0db8:0:0:0:0:0:1'), '2001:db8::1');
    is(Converge::Legacy::check_ip('::ffff:1.2.3.4'), '::ffff:102:304');
    is(Converge::Legacy::check_ip('1:0:1:0:1:0:1:0'), '1:0:1:0:1:0:1:0');
    ok(Converge::Error->caught(do { eval { Converge::Legacy::check_ip('01.2.3.4') }; $@ }, 'target'));
    ok(Converge::Error->caught(do { eval { Converge::Legacy::check_ip('fe80::1%eth0') }; $@ }, 'target'));
};

subtest 'framing refuses what a notary must not send' => sub {
    my $r = Converge::Legacy::parse_http_response("HTTP/1.0 200 X\r\nA: 1\r\na: 2\r\nContent-Length: 2\r\n\r\nokEXTRA");
    is($r->{headers}{a}, '1, 2');
    is($r->{body}, 'ok');
    for my $bad ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort",
        "HTTP/2 200\r\n\r\n", "HTTP/1.0 200 OK\r\n Bad: header\r\n\r\n", "HTTP/1.0 200 OK\r\n") {
        ok(Converge::Error->caught(do { eval { Converge::Legacy::parse_http_response($bad) }; $@ }, 'response'),
            'refused: ' . ($bad =~ s/\r\n/|/gr));
    }
};

subtest 'policies' => sub {
    ok(Converge::Policy::decide('consensus', [qw(success unreachable)], 1));
    ok(!Converge::Policy::decide('consensus', [qw(success unreachable)], 0));
    is(Converge::Policy::settled('consensus', ['failure'], 2, 1), 0);
    is(Converge::Policy::settled('majority', ['success'], 2, 1), undef);
    ok(!Converge::Policy::decide('minority', [qw(unreachable unreachable)], 1), 'never trusted without a success');
    is(Converge::Policy::cache_decision(1_000_000_000_000 * 2, 2_000_000_100, 600), 'hit', 'milliseconds are read as such');
    is(Converge::Policy::cache_decision(2_000_000_000, 2_000_000_000 - 301, undef), 'stale', 'from the future');
};

subtest 'bundles and configuration refuse what they must' => sub {
    my $pem = slurp("$KEYS/test-notary-cert.pem");
    my $b = Converge::Bundle->parse(JSON::XS->new->utf8->encode({ version => 1, name => 'Org A',
        hosts => [ { host => 'n.example', ssl_port => 443, http_port => 80, certificate => $pem } ] }));
    is($b->name, 'Org A');
    is(($b->hosts)[0]->ssl_port, 443);
    my $bad = sub { my ($json) = @_; Converge::Error->caught(do { eval { Converge::Bundle->parse($json) }; $@ }, 'bundle') };
    ok($bad->('{"version": 1, "name": "x", "hosts": []}'), 'no hosts');
    ok($bad->('{"version": 2}'), 'version 2');
    (my $broken = $pem) =~ s/MII/MIJ/;
    ok($bad->(JSON::XS->new->encode({ host => 'n.example', ssl_port => 443, http_port => 80, certificate => $broken })),
        'a certificate that does not parse');
    my $v0 = JSON::XS->new->canonical->encode({ host => 'n.example', ssl_port => 443, http_port => 80, certificate => $pem });
    ok(!$bad->($v0), 'a v0 bundle is read');
    ok($bad->($v0 =~ s/"ssl_port":443/"ssl_port":443.0/r), 'a float port');
    my $dir = File::Temp::tempdir(CLEANUP => 1);
    open(my $fh, '>', "$dir/converge.config") or die;
    print $fh '{"quorum": 3, "quorum": 0}';
    close $fh;
    ok(Converge::Error->caught(do { eval { Converge::Config->load($dir) }; $@ }, 'config'), 'the last value of a key counts');
    open($fh, '>', "$dir/converge.config") or die;
    print $fh '{"early-return": 1}';
    close $fh;
    ok(Converge::Error->caught(do { eval { Converge::Config->load($dir) }; $@ }, 'config'), 'a number is not a boolean');
    open($fh, '>', "$dir/converge.config") or die;
    print $fh '{"notary-agreement": " Consensus ", "quorum": 2}';
    close $fh;
    my $cfg = Converge::Config->load($dir);
    is($cfg->agreement, 'consensus');
    is($cfg->quorum, 2);
    ok(Converge::Error->caught(do { eval { Converge::Config->load("$dir/missing") }; $@ }, 'config'), 'a missing directory');

    # the bundles are read once, and again when the folders change
    mkdir "$dir/notaries-available";
    mkdir "$dir/notaries-enabled";
    for my $n ('A', 'B') {
        open(my $b, '>', "$dir/notaries-available/$n.notary") or die;
        print $b JSON::XS->new->encode({ version => 1, name => "Org $n",
            hosts => [ { host => 'n.example', ssl_port => 443, http_port => 80, certificate => $pem } ] });
        close $b;
        symlink("../notaries-available/$n.notary", "$dir/notaries-enabled/$n.notary") or die;
    }
    is_deeply([ map { $_->name } $cfg->notaries ], ['Org A', 'Org B'], 'both enabled');
    unlink "$dir/notaries-enabled/B.notary";
    is_deeply([ map { $_->name } $cfg->notaries ], ['Org A'], 'a disabled notary is seen at once');
};

subtest 'weak Ed25519 keys are refused' => sub {
    my $small = 'an Ed25519 public key of small order';
    for my $case (
        [ '0100000000000000000000000000000000000000000000000000000000000000', $small, 'the identity' ],
        [ '0100000000000000000000000000000000000000000000000000000000000080', $small, 'the identity, sign bit set' ],
        [ '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05', $small, 'y8, order 8' ],
        [ 'f0ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', 'an Ed25519 public key not in canonical form', 'p + 3' ],
        [ '0100', 'an Ed25519 public key has 32 bytes', 'two bytes' ],
    ) {
        is(weak_key(pack 'H*', $case->[0]), $case->[1], $case->[2]);
    }
    # the twins: generated keys and the largest canonical y (p - 1 is of small order, p - 2 is not)
    for my $i (1 .. 16) {
        my $pub = Crypt::PK::Ed25519->new->generate_key->export_key_raw('public');
        is(weak_key($pub), undef, 'a generated key: ' . unpack('H*', $pub));
    }
    is(weak_key(pack 'H*', 'ebffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f'), undef, 'y = p - 2');
};

subtest 'a transparency member naming one key twice is refused' => sub {
    my $keys = (parse_json(slurp("$FindBin::RealBin/../../vectors/transparency.json")))[0]{keys};
    my $raw = sub { MIME::Base64::decode_base64((split /\+/, $keys->{ $_[0] }, 3)[2]) };
    # a key under another name, with that name's key id
    my $vkey = sub {
        my ($name, $raw) = @_;
        return "$name+" . unpack('H8', Digest::SHA::sha256("$name\n$raw")) . '+' . MIME::Base64::encode_base64($raw, '');
    };
    my $policy = sub {
        return { log => $keys->{log}, witnesses => [ map { { name => (split /\+/)[0], vkey => $_ } } @_ ], min_cosignatures => scalar @_ };
    };
    my $twice = 'transparency names one key twice (two witnesses, or a witness and the log)';
    for my $case (
        [ 'one key under two witness names', $keys->{'witness-1'}, $vkey->('witness.test/witness-1b', $raw->('witness-1')) ],
        [ "the log's key as a witness's", $keys->{'witness-1'}, $vkey->('witness.test/log-twin', "\x04" . substr $raw->('log'), 1) ],
    ) {
        my ($why, @ws) = @$case;
        my $e = do { eval { Converge::Transparency::parse_policy($policy->(@ws)) }; $@ };
        ok(Converge::Error->caught($e, 'bundle'), "refused: $why") or diag explain $e;
        is(ref $e && $e->detail, $twice, "the reason: $why");
    }
    # the twin: two witnesses with their own keys
    my $p = eval { Converge::Transparency::parse_policy($policy->(@$keys{ 'witness-1', 'witness-2' })) };
    is(scalar @{ $p->{witnesses} || [] }, 2, 'two witnesses with their own keys parse') or diag $@;
    is($p && $p->{min}, 2, 'and both count');
};

subtest 'fuzz the response parser with a fixed seed' => sub {
    my $der = Converge::Bundle::der_of_pem(slurp("$KEYS/test-notary-cert.pem"));
    my $key = Crypt::PK::RSA->new("$KEYS/test-notary-key.pem");
    my $fp = Converge::Fingerprint->of($der)->colon_hex;
    my $list = '{"fingerprintList": [{"timestamp": {"start": "1323389219", "finish": "1324691510"}, "fingerprint": "' . $fp . '"}]}';
    my $sig = $key->sign_message($list, 'SHA1', 'v1.5');
    my $body = substr($list, 0, -1) . ', "signature": "' . MIME::Base64::encode_base64($sig, '') . '"}';
    my $good = "HTTP/1.0 200 X\r\nContent-Type: application/json\r\nContent-Length: " . length($body) . "\r\n\r\n" . $body;
    my $wanted = [ Converge::Fingerprint->parse($fp) ];
    is((Converge::Legacy::outcome_from_http($good, $wanted, $der))[0]->kind, 'listed', 'the unmutated response is listed');
    srand(20111206);
    my @tokens = ('{', '}', '[', ']', '"', ',', ':', '\\', "\r\n", 'NaN', '1e999', '-0', "\xff");
    my (%kinds, @wrong);
    for my $i (1 .. 3000) {
        my $b = $good;
        for (1 .. 1 + int rand 4) {
            my $at = int rand length $b;
            my $op = int rand 10;
            if ($op <= 2)    { substr($b, $at, 1) = chr int rand 256 }
            elsif ($op <= 4) { substr($b, $at, 1 + int rand 8) = '' }
            elsif ($op <= 7) { substr($b, $at, 0) = $tokens[int rand @tokens] }
            else             { substr($b, $at, 0) = substr($b, int rand length $b, int rand 41) }
            $b = 'x' if $b eq '';
        }
        my ($o, $r) = eval { Converge::Legacy::outcome_from_http($b, $wanted, $der) };
        unless ($o) { push @wrong, "died: $@"; next }
        $kinds{ $o->kind }++;
        push @wrong, 'a success without a signed 200' if $o->vote eq 'success' && !($r && $r->{status} == 200);
    }
    is_deeply(\@wrong, [], 'no mutation dies, only a signed 200 votes success');
    cmp_ok($kinds{response} // 0, '>', 100, 'many are malformed responses');
    cmp_ok($kinds{signature} // 0, '>', 10, 'some fail the signature');
};

use File::Temp ();
use JSON::XS ();
use Encode ();
done_testing;
