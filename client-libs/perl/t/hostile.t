# One hostile notary among honest ones (issue #31): a genuine notary (fake_world.py) and a
# notary holding its real keys that answers each hostile form over real TLS. Every form is that
# notary's vote with the documented kind, the genuine notary's vote is kept and a verdict comes
# back; each form has a twin the same notary answers cleanly.
use strict;
use warnings;
use Test::More;
use FindBin ();
use lib "$FindBin::RealBin/../lib", "$FindBin::RealBin/lib";
use Crypt::PK::RSA ();
use Crypt::PK::Ed25519 ();
use Digest::SHA ();
use File::Temp ();
use JSON::XS ();
use MIME::Base64 ();
use World;
use Responder;
use Converge;

my $w = World->new('Org A:listed');
my $h = Responder->new;
my ($G, $X) = ($w->info->{genuine}, $w->info->{forged});
my $rsa = Crypt::PK::RSA->new($h->key);
my $ed = Crypt::PK::Ed25519->new->generate_key;
my $ed_raw = $ed->export_key_raw('public');
my $kid = unpack('H*', substr(Digest::SHA::sha256($ed_raw), 0, 8));
my $port = 10443;

sub client {
    my ($extended) = @_;
    my $dir = File::Temp::tempdir('converge-perl-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    mkdir "$dir/notaries-enabled";
    my $pem = do { open(my $fh, '<:raw', $h->cert) or die $!; local $/; <$fh> };
    my %b = (version => 1, name => 'Hostile', hosts => [{ host => '127.0.0.1', ssl_port => 0 + $h->port, http_port => 0 + $h->port, certificate => $pem }]);
    if ($extended) {
        $b{protocols} = ['converge-answer/1'];
        $b{signing_keys} = [{ alg => 'ed25519', key_id => $kid, public_key => Converge::Bundle::b64url($ed_raw), status => 'current' }];
    }
    my %files = ('notaries-enabled/a.notary' => $w->info->{notaries}[0]{bundle}, 'notaries-enabled/h.notary' => JSON::XS->new->encode(\%b),
        'converge.config' => JSON::XS->new->encode({ 'notary-agreement' => 'majority', 'early-return' => JSON::XS::false,
            'extended-nonce' => JSON::XS::false, 'connect-timeout' => 2, 'notary-timeout' => 2, 'total-timeout' => 4 }));
    for my $f (keys %files) {
        open(my $fh, '>:utf8', "$dir/$f") or die $!;
        print {$fh} $files{$f};
        close $fh;
    }
    return Converge::Client->load($dir);
}

sub http {
    my ($body, $type) = @_;
    return "HTTP/1.0 200 X\r\nContent-Type: " . ($type // 'application/json') . "\r\nContent-Length: " . length($body) . "\r\n\r\n$body";
}

sub list {
    return '{"fingerprintList": [' . join(', ', map { qq({"timestamp": {"start": "1323389219", "finish": "1324691510"}, "fingerprint": "$_"}) } @_) . ']}';
}

# $signed without its final }, then the signature over $signed (RSA/SHA-1 with the notary's key).
sub sign {
    my ($signed) = @_;
    return substr($signed, 0, -1) . ', "signature": "' . MIME::Base64::encode_base64($rsa->sign_message($signed, 'SHA1', 'v1.5'), '') . '"}';
}

# [trusted, the genuine notary's vote/kind, the hostile one's] for the genuine certificate, a new
# port each time (nothing cached).
sub ask {
    my ($c, $response) = @_;
    $h->answer($response);
    my $v = $c->check('www.example.org', ++$port, $G);
    my %by = map { $_->name => $_->vote . '/' . $_->kind } $v->results;
    return [$v->trusted ? 1 : 0, $by{'Org A'}, $by{Hostile}];
}

subtest 'every hostile legacy form is that notary\'s failure, and the verdict comes back' => sub {
    my $c = client(0);
    my $good = list($G);
    my $member = sub { substr($good, 0, -1) . ", $_[0]}" };
    my $deep = sub { $member->('"d": ' . '[' x ($_[0] - 1) . ']' x ($_[0] - 1)) };
    my @forms = (
        ['genuine (twin)', sign($good), 'success/listed'],
        ['list spliced after the signature', substr(sign(list($X)), 0, -1) . ', "fingerprintList": ' . substr($good, 20, -1) . '}', 'failure/response'],
        ['member after the signature', substr(sign($good), 0, -1) . ', "x": 1}', 'failure/response'],
        ['bytes after the closing brace', sign($good) . "\n", 'failure/response'],
        ['malformed JSON after the signature', substr(sign($good), 0, -1) . ', ]}', 'failure/response'],
        ['duplicate list inside S, the last one counts', sign(substr(list($G), 0, -1) . ', ' . substr(list($X), 1)), 'failure/not-listed'],
        ['duplicate list inside S, twin', sign(substr(list($X), 0, -1) . ', ' . substr(list($G), 1)), 'success/listed'],
        ['a 5000-digit integer', sign($member->('"n": 1' . '0' x 4999)), 'failure/response'],
        ['a 15-digit integer (twin)', sign($member->('"n": 1' . '0' x 14)), 'success/listed'],
        ['a number as member name', sign($member->('1: 2')), 'failure/response'],
        ['nesting 33 levels', sign($deep->(33)), 'failure/response'],
        ['nesting 32 levels (twin)', sign($deep->(32)), 'success/listed'],
        ['a lone surrogate in the fingerprint', sign(list('\ud800')), 'failure/response'],
        ['NaN', sign($member->('"n": NaN')), 'failure/response'],
        ['a comment', sign($member->('"n": 1 /* c */')), 'failure/response'],
        ['a signature over other bytes', substr($good, 0, -1) . substr(sign(list($X)), length(list($X)) - 1), 'failure/signature'],
    );
    for my $f (@forms) {
        is_deeply(ask($c, http($f->[1])), [1, 'success/listed', $f->[2]], $f->[0]);
    }
    is($h->count, scalar @forms, 'the hostile notary was asked once per form');
};

# The canonical statement the notary would sign for this check, extra members before the final }.
sub statement {
    my ($p, $extra) = @_;
    return qq({"answered_at":) . time . qq(,"cache":"miss","detail":null,"key_id":"$kid","observations":[],)
        . qq("request":{"alg":"sha1","fingerprint":"$G","nonce":null},"target":{"host":"www.example.org","ip":null,"port":$p},)
        . qq("type":"converge-answer/1","verdict":"match") . ($extra // '') . '}';
}

sub answer {
    my ($t, $after) = @_;
    my $v = Converge::Bundle::b64url($ed->sign_message($t));
    return http(qq({"signature":{"alg":"ed25519","key_id":"$kid","value":"$v"},"statement":) . $t . ($after // '}'),
        'application/vnd.converge.answer+json');
}

subtest 'every hostile extended form is that notary\'s failure, and the verdict comes back' => sub {
    my $c = client(1);
    my @forms = (
        ['genuine (twin)', sub { answer(statement($_[0])) }, 'success/match'],
        ['a member spliced after the statement', sub { answer(statement($_[0]), ',"statement":{}}') }, 'failure/bad-signature'],
        ['bytes after the closing brace', sub { answer(statement($_[0]), "}\n") }, 'failure/malformed'],
        ['a 5000-digit integer', sub { answer(statement($_[0], ',"n":1' . '0' x 4999)) }, 'failure/malformed'],
        ['NaN', sub { answer(statement($_[0], ',"n":NaN')) }, 'failure/malformed'],
        ['a number as member name', sub { answer(statement($_[0], ',1:2')) }, 'failure/malformed'],
        ['nesting 33 levels', sub { answer(statement($_[0], ',"d":' . '[' x 32 . ']' x 32)) }, 'failure/malformed'],
        ['a repeated verdict inside T, the last one counts', sub { answer(statement($_[0], ',"verdict":"mismatch"')) }, 'failure/response'],
    );
    for my $f (@forms) {
        is_deeply(ask($c, $f->[1]->($port + 1)), [1, 'success/listed', $f->[2]], $f->[0]);
    }
};

$h->stop;
$w->stop;
done_testing;
