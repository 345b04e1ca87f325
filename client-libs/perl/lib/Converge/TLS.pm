package Converge::TLS;
use strict;
use warnings;
use IO::Socket::IP ();
use IO::Socket::SSL ();
use Net::SSLeay ();
use MIME::Base64 ();
use URI ();
use Converge::Error;
use Converge::Bundle;
use Converge::Client;

our $VERSION = '0.1.0';

# The notaries' decision inside OpenSSL's handshake, for connections to a known host:port,
# as IO::Socket::SSL options (SSL_verify_callback); the decision (verdict or error) is kept in
# $state->{verdict} / $state->{error}. With require_ca, ordinary CA validation must pass too.
sub ssl_opts {
    my (%a) = @_;
    my ($host, $port) = @a{qw(host port)};
    my $state = $a{state} // {};
    my $require_ca = $a{require_ca} ? 1 : 0;
    my $client = $a{client};
    return (
        # A resumed session skips the verify callback: a TLS session cache (SSL_session_cache,
        # SSL_session_cache_size) offers a session only to the origin whose checked handshake
        # made it. IO::Socket::SSL's own key is the peer's address, which through a proxy is
        # the proxy's for every origin (and one IP for every name it serves).
        SSL_session_key     => "converge https://$host:$port",
        SSL_verify_mode     => IO::Socket::SSL::SSL_VERIFY_PEER(),
        SSL_verifycn_scheme => $require_ca ? 'www' : 'none',
        ($require_ca ? (SSL_verifycn_name => $host) : ()),
        SSL_verify_callback => sub {
            my ($preverify_ok, undef, undef, undef, $cert, $depth) = @_;
            return $require_ca ? $preverify_ok : 1 if $depth > 0;    # the chain: the notaries decide about the leaf
            my $der = Converge::Bundle::der_of_pem(Net::SSLeay::PEM_get_string_X509($cert)) // return 0;
            my $memo = $state->{memo} //= {};
            return $memo->{$der} if exists $memo->{$der};
            my $ok = eval {
                my $v = ($client // Converge::Client->shared)->check_certificate($host, $port, $der);
                $state->{verdict} = $v;
                $v->trusted && (!$require_ca || $preverify_ok) ? 1 : 0;
            };
            unless (defined $ok) {
                $state->{error} = $@;
                $ok = 0;
            }
            return $memo->{$der} = $ok;
        },
    );
}

# Whether the handshake behind $state was refused by (or could not get) a converge decision.
sub decided { my ($state) = @_; exists $state->{verdict} || exists $state->{error} }

# The Converge::NotTrusted for a failed handshake's state.
sub not_trusted {
    my ($host, $port, $state, $cause) = @_;
    my $v = $state->{verdict};
    my $err = $state->{error};
    return Converge::NotTrusted->new(host => $host, port => $port, verdict => ($v && !$v->trusted ? $v : undef),
        cause => (ref $err ? $err->message : $err) // $cause // 'no verdict');
}

# A TLS socket (IO::Socket::SSL) to $host:$port whose certificate the notaries vouch for;
# nothing has been sent on it. %opt: client, proxy ("http://[user:pass@]h:p", CONNECT),
# timeout (seconds), require_ca, any SSL_* option (SSL_ca_file...). Dies with a
# Converge::NotTrusted when the notaries do not vouch for the certificate, with a message for
# any other failure.
sub connect {
    my ($class, $host, $port, %opt) = @_;
    my $client = delete $opt{client} // Converge::Client->shared;
    my $proxy = delete $opt{proxy};
    my $timeout = delete $opt{timeout} // $client->config->total_timeout + 10;
    my $require_ca = delete $opt{require_ca};
    my $authority = ($host =~ /:/ ? "[$host]" : $host) . ":$port";
    my $sock;
    if (defined $proxy && $proxy ne '') {
        my $u = URI->new($proxy =~ m{://} ? $proxy : "http://$proxy");
        $sock = IO::Socket::IP->new(PeerHost => $u->host, PeerPort => $u->port, Timeout => $timeout)
            or die "proxy $proxy: $@\n";
        my $auth = '';
        if (defined(my $ui = $u->userinfo)) {
            $auth = 'Proxy-Authorization: Basic ' . MIME::Base64::encode_base64(URI::Escape::uri_unescape($ui), '') . "\r\n";
        }
        $sock->syswrite("CONNECT $authority HTTP/1.1\r\nHost: $authority\r\n$auth\r\n");
        my $head = '';
        while (substr($head, -4) ne "\r\n\r\n") {
            my $n = $sock->sysread(my $c, 1);
            die "proxy $proxy: no reply to CONNECT\n" if !$n || length $head > 16384;
            $head .= $c;
        }
        die 'proxy refused CONNECT ' . $authority . ': ' . ($head =~ /\A([^\r\n]*)/)[0] . "\n" unless $head =~ m{\AHTTP/1\.[01] 2\d\d};
    } else {
        $sock = IO::Socket::IP->new(PeerHost => $host, PeerPort => $port, Timeout => $timeout) or die "$authority: $@\n";
    }
    my $state = {};
    my $ssl = IO::Socket::SSL->start_SSL($sock, %opt, Timeout => $timeout,
        SSL_hostname => ($host =~ /\A[0-9.]+\z|:/ ? '' : $host),
        ssl_opts(host => $host, port => $port, client => $client, require_ca => $require_ca, state => $state));
    return $ssl if $ssl;
    my $why = IO::Socket::SSL::errstr();
    close $sock;
    die not_trusted($host, $port, $state, $why) if decided($state);
    die "$authority: TLS: $why\n";
}

1;

__END__

=head1 NAME

Converge::TLS - TLS connections decided by the notaries (IO::Socket::SSL)

=head1 SYNOPSIS

    use Converge::TLS;

    # a socket the notaries vouch for (nothing sent yet); through a proxy with CONNECT
    my $sock = Converge::TLS->connect('www.example.org', 443);
    my $sock = Converge::TLS->connect('www.example.org', 443, proxy => 'http://proxy:3128');

    # any IO::Socket::SSL user: the options for one host:port
    my $s = IO::Socket::SSL->new(PeerHost => $h, PeerPort => $p,
        Converge::TLS::ssl_opts(host => $h, port => $p));

=head1 DESCRIPTION

C<ssl_opts> returns IO::Socket::SSL options whose C<SSL_verify_callback> asks the notaries
about the leaf certificate for the given host and port, inside the handshake: a certificate
they do not vouch for fails the handshake before any application data is written. The CA
result is ignored (the notaries replace it) unless C<require_ca> is true, when both must
pass. C<connect> wraps that and dies with a L<Converge::NotTrusted> saying why.

For HTTP, use L<Converge::UserAgent> (LWP) or L<Converge::HTTP::Tiny>.

=cut
