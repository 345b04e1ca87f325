# End to end through every hook: the genuine site loads; the forged one fails before a single
# byte of the request reaches it (the must-fail twin): Converge::UserAgent (LWP),
# Converge::HTTP::Tiny, Converge::TLS->connect and plain IO::Socket::SSL with ssl_opts; through a
# CONNECT proxy the origin is asked about, and an attacker's proxy is caught.
use strict;
use warnings;
use Test::More;
use FindBin ();
use lib "$FindBin::RealBin/../lib", "$FindBin::RealBin/lib";
use World;
use Converge;
use Converge::TLS;
use Converge::UserAgent;
use Converge::HTTP::Tiny;
use IO::Socket::SSL ();

my $w = World->new('Org A:listed', 'Org B:listed', '--site', 'genuine=genuine', '--site', 'forged=forged',
    '--proxy', 'honest=honest', '--proxy', 'evil=forged');
my $c = Converge::Client->load($w->config_dir({ 'notary-agreement' => 'consensus' }));
my %site = %{ $w->info->{sites} };
sub url { 'https://127.0.0.1:' . $site{ $_[0] } . '/' }
sub forged_requests { $w->ask('count')->{sites}{forged} }

subtest 'LWP: the genuine site loads, the forged one is refused before the request' => sub {
    my $ua = Converge::UserAgent->new(converge => $c, env_proxy => 0, timeout => 10);
    my $r = $ua->get(url('genuine'));
    ok($r->is_success, $r->status_line);
    is($r->content, 'genuine');
    is(Converge::UserAgent::not_trusted($r), undef);
    my $bad = $ua->get(url('forged'));
    ok(!$bad->is_success, 'the forged site fails');
    my $nt = Converge::UserAgent::not_trusted($bad);
    isa_ok($nt, 'Converge::NotTrusted');
    ok($nt && $nt->verdict && !$nt->verdict->trusted, 'with the verdict');
    like($bad->header('X-Converge-Not-Trusted') // '', qr/converge does not trust 127\.0\.0\.1:$site{forged}/);
    is(forged_requests(), 0, 'no request reached the forged site');
    # twin of the twin: a plain LWP agent with no CA check does reach it
    my $plain = LWP::UserAgent->new(env_proxy => 0, ssl_opts => { verify_hostname => 0, SSL_verify_mode => 0 });
    is($plain->get(url('forged'))->content, 'forged', 'an unhooked agent reaches the forged site');
    is(forged_requests(), 1);
};

subtest 'LWP through a CONNECT proxy: the origin is asked about, an attacker proxy is caught' => sub {
    my $fresh = Converge::Client->load($w->config_dir({ 'notary-agreement' => 'consensus', db => undef }));    # no cache
    my $ua = Converge::UserAgent->new(converge => $fresh, env_proxy => 0, timeout => 10);
    $ua->proxy(https => 'http://127.0.0.1:' . $w->info->{proxies}{honest});
    my $r = $ua->get(url('genuine'));
    is($r->content, 'genuine', $r->status_line);
    like($w->ask('count')->{proxies}{honest}[0], qr/\ACONNECT 127\.0\.0\.1:$site{genuine} /, 'the proxy was used');
    like($w->ask('requests 0')->[-1], qr/\+$site{genuine} HTTP/, "the notaries were asked about the origin's port");
    my $before = forged_requests();
    $ua->proxy(https => 'http://127.0.0.1:' . $w->info->{proxies}{evil});
    my $bad = $ua->get(url('genuine'));
    isa_ok(Converge::UserAgent::not_trusted($bad), 'Converge::NotTrusted', 'the diverting proxy');
    is(forged_requests(), $before, 'nothing was written to the forged server');
};

subtest 'HTTP::Tiny' => sub {
    my $http = Converge::HTTP::Tiny->new(converge => $c, timeout => 10);
    my $r = $http->get(url('genuine'));
    is($r->{content}, 'genuine', "status $r->{status}");
    my $bad = $http->get(url('forged'));
    is($bad->{status}, 599);
    isa_ok($bad->{converge_not_trusted}, 'Converge::NotTrusted');
    is(forged_requests(), 1, 'no request reached the forged site');
    my $via = Converge::HTTP::Tiny->new(converge => $c, timeout => 10, proxy => 'http://127.0.0.1:' . $w->info->{proxies}{evil});
    isa_ok($via->get(url('genuine'))->{converge_not_trusted}, 'Converge::NotTrusted', 'through the diverting proxy');
    is(forged_requests(), 1);
};

subtest 'Converge::TLS->connect gives only a vouched-for socket' => sub {
    my $s = Converge::TLS->connect('127.0.0.1', $site{genuine}, client => $c);
    print {$s} "GET / HTTP/1.0\r\n\r\n";
    my $all = do { local $/; <$s> };
    like($all, qr/genuine\z/);
    my $e = do { eval { Converge::TLS->connect('127.0.0.1', $site{forged}, client => $c) }; $@ };
    isa_ok($e, 'Converge::NotTrusted');
    like("$e", qr/certificate not trusted: 0 of 2 notaries confirm/);
    my $p = do { eval { Converge::TLS->connect('127.0.0.1', $site{genuine}, client => $c,
        proxy => 'http://127.0.0.1:' . $w->info->{proxies}{honest}) } };
    ok($p, 'through the honest proxy');
    is(forged_requests(), 1);
};

subtest 'IO::Socket::SSL with ssl_opts; require_ca adds the CA check' => sub {
    my $ok = IO::Socket::SSL->new(PeerHost => '127.0.0.1', PeerPort => $site{genuine},
        Converge::TLS::ssl_opts(host => '127.0.0.1', port => $site{genuine}, client => $c));
    ok($ok, 'the genuine site') or diag IO::Socket::SSL::errstr();
    my $state = {};
    my $no = IO::Socket::SSL->new(PeerHost => '127.0.0.1', PeerPort => $site{forged},
        Converge::TLS::ssl_opts(host => '127.0.0.1', port => $site{forged}, client => $c, state => $state));
    ok(!$no, 'the forged site');
    ok($state->{verdict} && !$state->{verdict}->trusted, 'refused by the verdict');
    my $strict = IO::Socket::SSL->new(PeerHost => '127.0.0.1', PeerPort => $site{genuine}, SSL_ca_file => "$World::ROOT/client-libs/vectors/keys/test-other-cert.pem",
        Converge::TLS::ssl_opts(host => '127.0.0.1', port => $site{genuine}, client => $c, require_ca => 1));
    ok(!$strict, 'require_ca: vouched for, but no CA trusts it');
};

$w->stop;
done_testing;
