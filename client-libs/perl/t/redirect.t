# Converge::HTTP::Tiny judges every redirect hop by its own origin (issue #37): the attacker's
# site, which the notaries honestly vouch for, redirects to the bank, where his box presents
# his own certificate; that hop is asked about as the bank's host:port and refused before the
# request is written. Twin: a genuine redirect to another origin is followed and trusted.
# The same world shows that a TLS session is resumed only for the origin it was checked for:
# through a CONNECT proxy IO::Socket::SSL keys its session cache by the proxy's address, so
# without an origin-bound key a session from the attacker's vouched site is offered to (and
# resumed by) his box posing as the bank, and the verify callback never runs. And a kept-alive
# connection that unhooked code of the application opened on a connection cache it shares with
# a Converge::UserAgent (to his box posing as the bank) is not used by the hooked agent.
use strict;
use warnings;
use Test::More;
use FindBin ();
use lib "$FindBin::RealBin/../lib", "$FindBin::RealBin/lib";
use Crypt::PK::RSA ();
use File::Temp ();
use JSON::XS ();
use MIME::Base64 ();
use World;
use Responder;
use Converge;
use Converge::HTTP::Tiny;
use Converge::UserAgent;
use IO::Select ();
use IO::Socket::IP ();
use IO::Socket::SSL ();
use POSIX ();

my $KEYS = "$FindBin::RealBin/../../vectors/keys";
my $w = World->new('Org A:listed', '--site', 'genuine=genuine', '--site', 'forged=forged');
my ($G, $X) = ($w->info->{genuine}, $w->info->{forged});
my %site = %{ $w->info->{sites} };
my $redirect = sub { "HTTP/1.1 302 Found\r\nLocation: https://127.0.0.1:$_[0]/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" };
# the attacker's own site (his certificate, the "other" test key), redirecting wherever he likes
my $attacker = Responder->new;
# his keep-alive site (his certificate too), vouched for at its own port
my $box = Responder->new(keep => 1);
$box->answer("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbox");

# A notary that sees, per target, what the world shows it: the attacker's certificate at his
# own site, the bank's genuine certificate at the bank (served here by the forged site's port).
my %sees = ("127.0.0.1+" . $attacker->port => $X, "127.0.0.1+" . $box->port => $X, "127.0.0.1+$site{forged}" => $G, "127.0.0.1+$site{genuine}" => $G);
my $rsa = Crypt::PK::RSA->new("$KEYS/test-other-key.pem");
my $notary = Responder->new(handler => sub {
    my ($req) = @_;
    my ($target) = $req =~ m{\APOST /target/([^/ ]+)};
    my ($fp) = $req =~ /fingerprint=([0-9A-F:]+)\z/;
    my $seen = $sees{ $target // '' } // '00';
    my $list = qq({"fingerprintList": [{"timestamp": {"start": "1323389219", "finish": "1324691510"}, "fingerprint": "$seen"}]});
    my $body = substr($list, 0, -1) . ', "signature": "' . MIME::Base64::encode_base64($rsa->sign_message($list, 'SHA1', 'v1.5'), '') . '"}';
    my $status = defined $fp && $fp eq $seen ? '200 OK' : '409 Conflict';
    return "HTTP/1.0 $status\r\nContent-Type: application/json\r\nContent-Length: " . length($body) . "\r\n\r\n$body";
});

my $dir = File::Temp::tempdir('converge-perl-XXXXXX', TMPDIR => 1, CLEANUP => 1);
mkdir "$dir/notaries-enabled";
my $pem = do { open(my $fh, '<:raw', $notary->cert) or die $!; local $/; <$fh> };
my %files = ('notaries-enabled/n.notary' => JSON::XS->new->encode({ version => 1, name => 'Org N',
        hosts => [{ host => '127.0.0.1', ssl_port => 0 + $notary->port, http_port => 0 + $notary->port, certificate => $pem }] }),
    'converge.config' => JSON::XS->new->encode({ 'notary-agreement' => 'consensus', 'cache-lifetime' => 0,
        'connect-timeout' => 2, 'notary-timeout' => 2, 'total-timeout' => 4 }));
for my $f (keys %files) {
    open(my $fh, '>:raw', "$dir/$f") or die $!;
    print {$fh} $files{$f};
    close $fh;
}
my $c = Converge::Client->load($dir);
my $http = Converge::HTTP::Tiny->new(converge => $c, timeout => 10);
my $forged_requests = sub { $w->ask('count')->{sites}{forged} };

subtest "the attacker's vouched site redirecting to the bank (forged) is refused" => sub {
    $attacker->answer($redirect->($site{forged}));
    my $r = $http->get('https://127.0.0.1:' . $attacker->port . '/', { headers => { Cookie => 'bank=secret' } });
    is($r->{status}, 599, 'the hop to the bank fails');
    isa_ok($r->{converge_not_trusted}, 'Converge::NotTrusted');
    like($r->{converge_not_trusted}->message, qr/127\.0\.0\.1:$site{forged}/, 'asked about the bank\'s own host:port');
    is($attacker->count, 1, 'the first hop reached the attacker\'s site (vouched for)');
    is($forged_requests->(), 0, 'not a byte of the request reached the forged bank');
};

subtest 'twin: a genuine redirect to another origin is followed' => sub {
    $attacker->answer($redirect->($site{genuine}));
    my $r = $http->get('https://127.0.0.1:' . $attacker->port . '/');
    is($r->{content}, 'genuine', "status $r->{status}");
    ok(!$r->{converge_not_trusted});
    is(scalar @{ $r->{redirects} || [] }, 1, 'one redirect followed');
};

subtest 'twin: the bank itself, asked directly, is refused the same way (and the genuine one is not)' => sub {
    ok($http->get("https://127.0.0.1:$site{forged}/")->{converge_not_trusted}, 'forged');
    is($http->get("https://127.0.0.1:$site{genuine}/")->{content}, 'genuine', 'genuine');
    is($forged_requests->(), 0);
};

# A CONNECT proxy (a forked process, at most 50 tunnels, 2 minutes) that sends the tunnels for
# the ports in %$divert to other ports: the attacker's proxy when it diverts the bank.
sub divert_proxy {
    my (%divert) = @_;
    my $srv = IO::Socket::IP->new(LocalHost => '127.0.0.1', LocalPort => 0, Listen => 8, ReuseAddr => 1) or die "proxy: $@\n";
    my $pid = fork // die "fork: $!\n";
    if (!$pid) {
        alarm 120;
        for (1 .. 50) {
            my $c = $srv->accept or next;
            my $head = '';
            while ($head !~ /\r\n\r\n\z/ && length $head < 4096) { sysread($c, my $b, 1) or last; $head .= $b }
            my ($port) = $head =~ /\ACONNECT 127\.0\.0\.1:([0-9]+) / or next;
            my $up = IO::Socket::IP->new(PeerHost => '127.0.0.1', PeerPort => $divert{$port} // $port) or next;
            syswrite($c, "HTTP/1.1 200 Connection established\r\n\r\n");
            next if fork;
            my $sel = IO::Select->new($c, $up);
            RELAY: while (my @ready = $sel->can_read(10)) {
                for my $from (@ready) {
                    sysread($from, my $buf, 16384) or last RELAY;
                    syswrite($from == $c ? $up : $c, $buf) or last RELAY;
                }
            }
            POSIX::_exit(0);
        }
        POSIX::_exit(0);
    }
    return ($srv->sockport, $pid);
}

# One LWP agent as users turn on reuse: keep-alive and a TLS session cache shared by its
# connections; first the attacker's vouched site (its kept-alive socket keeps the session
# cached), then the bank through the same proxy.
my $after_the_attackers_site = sub {
    my ($proxy_port) = @_;
    my $ua = Converge::UserAgent->new(converge => $c, env_proxy => 0, timeout => 10, keep_alive => 4,
        ssl_opts => { SSL_session_cache => IO::Socket::SSL::Session_Cache->new(8) });
    $ua->proxy(https => "http://127.0.0.1:$proxy_port");
    my $site_r = $ua->get('https://127.0.0.1:' . $attacker->port . '/');
    my $bank_r = $ua->get("https://127.0.0.1:$site{genuine}/", Cookie => 'bank=secret');
    return ($site_r, $bank_r);
};

subtest "LWP: a session from the attacker's vouched site is not resumed by his box posing as the bank" => sub {
    my ($port, $pid) = divert_proxy($site{genuine} => $attacker->port);
    $attacker->answer("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nsite");
    my $before = $attacker->count;
    my ($site_r, $bank_r) = $after_the_attackers_site->($port);
    is($site_r->content, 'site', 'the attacker\'s own site is vouched for');
    isa_ok(Converge::UserAgent::not_trusted($bank_r), 'Converge::NotTrusted', 'the box posing as the bank')
        or diag($bank_r->status_line . ' ' . $bank_r->content);
    is($attacker->count - $before, 1, 'the bank request never reached the attacker');
    kill 'TERM', $pid;
    waitpid $pid, 0;
};

subtest 'twin: the same agent through an honest proxy reaches the genuine bank' => sub {
    my ($port, $pid) = divert_proxy();
    my ($site_r, $bank_r) = $after_the_attackers_site->($port);
    is($site_r->content, 'site');
    is($bank_r->content, 'genuine', $bank_r->status_line);
    ok(!Converge::UserAgent::not_trusted($bank_r));
    kill 'TERM', $pid;
    waitpid $pid, 0;
};

subtest 'LWP: a connection an unhooked agent sharing the connection cache opened is not used' => sub {
    my ($port, $pid) = divert_proxy($site{genuine} => $box->port);
    my $ua = Converge::UserAgent->new(converge => $c, env_proxy => 0, timeout => 10, keep_alive => 4);
    my $plain = LWP::UserAgent->new(env_proxy => 0, timeout => 10, conn_cache => $ua->conn_cache,
        ssl_opts => { verify_hostname => 0, SSL_verify_mode => 0 });
    $_->proxy(https => "http://127.0.0.1:$port") for $ua, $plain;
    my $before = $box->count;
    is($plain->get("https://127.0.0.1:$site{genuine}/")->content, 'box', 'the unhooked code took the box for the bank');
    my $r = $ua->get("https://127.0.0.1:$site{genuine}/", Cookie => 'bank=secret');
    isa_ok(Converge::UserAgent::not_trusted($r), 'Converge::NotTrusted', 'the hooked request') or diag($r->status_line);
    is($box->count - $before, 1, 'the hooked request never reached the box');
    kill 'TERM', $pid;
    waitpid $pid, 0;
};

subtest 'twin: the agent reuses its own checked keep-alive connection (one check for two requests)' => sub {
    my $ua = Converge::UserAgent->new(converge => $c, env_proxy => 0, timeout => 10, keep_alive => 4);
    my ($asked, $served) = ($notary->count, $box->count);
    is($ua->get('https://127.0.0.1:' . $box->port . '/')->content, 'box') for 1 .. 2;
    is($box->count - $served, 2, 'two requests');
    is($notary->count - $asked, 1, 'one handshake checked: the second request reused its connection');
};

$_->stop for $notary, $attacker, $box;
$w->stop;
done_testing;
