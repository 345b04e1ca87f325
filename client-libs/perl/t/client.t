# The client against real TLS notaries on 127.0.0.1 (fake_world.py): votes, the cache, every
# notary asked at once, early decisions, every timeout, pins, both formats, the bounce relay's
# wire form, bad input.
use strict;
use warnings;
use Test::More;
use FindBin ();
use lib "$FindBin::RealBin/../lib", "$FindBin::RealBin/lib";
use Time::HiRes ();
use World;
use Converge;
use Converge::Legacy;

sub kinds { [ map { $_->kind } $_[0]->results ] }

subtest 'three notaries confirm, then a cache hit without the network' => sub {
    my $w = World->new('Org A:listed', 'Org B:listed', 'Org C:listed');
    my $c = Converge::Client->load($w->config_dir({ 'early-return' => JSON::XS::false }));
    my $v = $c->check('www.example.org', 443, $w->info->{genuine});
    ok($v->trusted);
    is_deeply(kinds($v), [qw(listed listed listed)]);
    is_deeply([ map { $_->protocol } $v->results ], [ ('convergence-v1') x 3 ]);
    my $want = Converge::Legacy::request_bytes('www.example.org', 443, Converge::Fingerprint->parse($w->info->{genuine}));
    is_deeply($w->ask('requests 0'), [$want], 'the exact 2011 request');
    my $again = $c->check('WWW.example.org', 443, lc $w->info->{genuine});
    ok($again->from_cache && $again->trusted, 'a cache hit');
    is_deeply($w->ask('count')->{notaries}, [1, 1, 1], 'without asking anyone');
    ok(!$c->check('www.example.org', 8443, $w->info->{genuine})->from_cache, 'twin: another port is not a hit');
};

subtest 'a forged certificate is untrusted and never cached' => sub {
    my $w = World->new('Org A:listed', 'Org B:listed');
    my $c = Converge::Client->load($w->config_dir);
    my $v = $c->check('bank.example', 443, $w->info->{forged});
    ok(!$v->trusted);
    is_deeply(kinds($v), [qw(mismatch mismatch)]);
    ok(!$c->check('bank.example', 443, $w->info->{forged})->from_cache);
};

subtest 'notaries are asked at once' => sub {
    my $w = World->new('Org A:listed', 'Org B:listed', 'Org C:listed');
    $w->ask("delay $_ 400") for 0 .. 2;
    my $c = Converge::Client->load($w->config_dir({ 'early-return' => JSON::XS::false }));
    my $t0 = Time::HiRes::time();
    ok($c->check('par.example', 443, $w->info->{genuine})->trusted);
    cmp_ok(Time::HiRes::time() - $t0, '<', 1.1, 'three 400 ms answers in well under 1.2 s');
};

subtest 'early return, and its twin' => sub {
    my $w = World->new('Org A:mismatch', 'Org B:hang', 'Org C:hang');
    my $c = Converge::Client->load($w->config_dir({ 'notary-agreement' => 'consensus', 'notary-timeout' => 3, 'total-timeout' => 5 }));
    my $t0 = Time::HiRes::time();
    my $v = $c->check('early.example', 443, $w->info->{genuine});
    ok(!$v->trusted);
    cmp_ok(Time::HiRes::time() - $t0, '<', 1.5);
    is_deeply(kinds($v), [qw(mismatch settled settled)]);
    my $late = Converge::Client->load($w->config_dir({ 'notary-agreement' => 'consensus', 'early-return' => JSON::XS::false,
        'notary-timeout' => 0.5 }));
    is_deeply(kinds($late->check('early.example', 443, $w->info->{genuine})), [qw(mismatch timeout timeout)]);
};

subtest 'the total timeout bounds everything' => sub {
    my $w = World->new('Org A:hang', 'Org B:hang');
    my $c = Converge::Client->load($w->config_dir({ 'notary-timeout' => 10, 'total-timeout' => 0.6 }));
    my $t0 = Time::HiRes::time();
    my $v = $c->check('slow.example', 443, $w->info->{genuine});
    my $took = Time::HiRes::time() - $t0;
    ok(!$v->trusted);
    ok($took >= 0.55 && $took < 2, "took $took s");
    is_deeply(kinds($v), [qw(timeout timeout)]);
};

subtest 'a wrong pin and garbage are failures' => sub {
    my $w = World->new('Org Impostor:listed:other', 'Org A:garbage', 'Org B:listed');
    my $dir = $w->config_dir({ 'notary-agreement' => 'consensus', 'early-return' => JSON::XS::false });
    my ($f) = glob "$dir/notaries-available/*Impostor*";
    my $slurp = sub { open(my $fh, '<:raw', $_[0]) or die; local $/; <$fh> };
    my $other = JSON::XS->new->allow_nonref->encode($slurp->("$World::ROOT/client-libs/vectors/keys/test-other-cert.pem"));
    my $mine = JSON::XS->new->allow_nonref->encode($slurp->("$World::ROOT/client-libs/vectors/keys/test-notary-cert.pem"));
    my $text = $slurp->($f);
    $text =~ s/\Q$other\E/$mine/ or die 'the impostor bundle was not rewritten';
    open(my $fh, '>:raw', $f) or die;
    print $fh $text;
    close $fh;
    my $v = Converge::Client->load($dir)->check('pin.example', 443, $w->info->{genuine});
    ok(!$v->trusted);
    is_deeply(kinds($v), [qw(pin response listed)]);
    is($w->ask('count')->{notaries}[0], 0, 'nothing was sent to the impostor');
};

subtest 'extended answers are bound and fresh' => sub {
    my $w = World->new('Org A:extended', 'Org B:extended', 'Org C:extended-stale');
    my $c = Converge::Client->load($w->config_dir({ 'early-return' => JSON::XS::false }, extended => 1));
    my $v = $c->check('ext.example', 443, $w->info->{genuine});
    is_deeply(kinds($v), [qw(match match stale)]);
    ok($v->trusted);
    like($w->ask('requests 0')->[0], qr/"nonce":"[A-Za-z0-9_-]{22}"/, 'a fresh nonce');
    my $off = Converge::Client->load($w->config_dir({ extended => 'off' }, extended => 1, indices => [0]));
    is(($off->check('ext.example', 443, $w->info->{genuine})->results)[0]->protocol, 'convergence-v1', 'extended off: legacy');
};

subtest 'a 503 is unreachable and stands aside' => sub {
    my $w = World->new('Org A:status503', 'Org B:listed');
    my $c = Converge::Client->load($w->config_dir({ 'notary-agreement' => 'consensus', 'early-return' => JSON::XS::false }));
    my $v = $c->check('aside.example', 443, $w->info->{genuine});
    is_deeply([ map { $_->vote } $v->results ], [qw(unreachable success)]);
    ok($v->trusted, 'stand-aside on: trusted');
    my $strict = Converge::Client->load($w->config_dir({ 'notary-agreement' => 'consensus', 'early-return' => JSON::XS::false,
        'stand-aside' => JSON::XS::false }));
    ok(!$strict->check('aside.example', 443, $w->info->{genuine})->trusted, 'twin: stand-aside off, untrusted');
};

subtest 'bad input is a typed error before any notary is asked' => sub {
    my $w = World->new('Org A:listed');
    my $c = Converge::Client->load($w->config_dir);
    for my $case (['a b', 443, $w->info->{genuine}, 'target'], ['ok.example', 0, $w->info->{genuine}, 'target'],
        ['ok.example', 443, 'zz', 'fingerprint'], ['ok.example', 443, $w->info->{genuine}, 'target', ip => '1.2.3'] ) {
        my ($h, $p, $f, $kind, @opt) = @$case;
        my $e = do { eval { $c->check($h, $p, $f, @opt) }; $@ };
        ok(Converge::Error->caught($e, $kind), "$h $p: $kind") or diag $e;
    }
    is_deeply($w->ask('count')->{notaries}, [0]);
    my $e = do { eval { Converge::Client->load($w->config_dir({}, indices => []))->check('ok.example', 443, $w->info->{genuine}) }; $@ };
    ok(Converge::Error->caught($e, 'config'), 'no notaries enabled');
    like("$e", qr/notaries-enabled/, 'says where it looked');
};

subtest 'a stale cache entry is asked again' => sub {
    my $w = World->new('Org A:listed');
    my $now = 2_000_000_000;
    my $c = Converge::Client->load($w->config_dir({ 'cache-lifetime' => 60 }), clock => sub { $now });
    ok(!$c->check('stale.example', 443, $w->info->{genuine})->from_cache);
    $now += 30;
    ok($c->check('stale.example', 443, $w->info->{genuine})->from_cache);
    $now += 61;
    ok(!$c->check('stale.example', 443, $w->info->{genuine})->from_cache);
    is_deeply($w->ask('count')->{notaries}, [2]);
};

subtest 'converge() with a config_dir, and the ip form' => sub {
    my $w = World->new('Org A:listed', 'Org B:listed');
    my $dir = $w->config_dir({ db => undef });
    my $v = Converge::converge('ip.example', 443, $w->info->{genuine}, config_dir => $dir, ip => '127.0.0.1');
    ok($v->trusted);
    like($w->ask('requests 0')->[0], qr{\APOST /target/ip\.example\+443/127\.0\.0\.1 HTTP/1\.0\r\n}, 'the address segment');
    ok(!Converge::converge('ip.example', 443, $w->info->{genuine}, config_dir => $dir)->from_cache, 'db null: no cache');
};

use JSON::XS ();
done_testing;
