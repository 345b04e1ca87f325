package Converge::UserAgent;
use strict;
use warnings;
use parent 'LWP::UserAgent';
use LWP::Protocol::https ();
use Scalar::Util ();
use Converge::TLS;

our $VERSION = '0.1.0';

# LWP::UserAgent whose HTTPS connections the notaries decide (proxies included: the origin is
# asked about). Options beyond LWP's: converge (a Converge::Client; default: the shared one),
# require_ca (CA validation and host name checks must pass as well).
sub new {
    my ($class, %a) = @_;
    my $client = delete $a{converge};
    my $require_ca = delete $a{require_ca};
    my $self = $class->SUPER::new(%a);
    $self->{converge_client} = $client;
    $self->{converge_require_ca} = $require_ca ? 1 : 0;
    return $self;
}

sub send_request {
    my ($self, $request, @rest) = @_;
    my $uri = $request->uri;
    return $self->SUPER::send_request($request, @rest) unless $uri->scheme && $uri->scheme eq 'https';
    my ($host, $port) = ($uri->host, $uri->port);
    my $state = {};
    my %saved = %{ $self->{ssl_opts} || {} };
    $self->ssl_opts(verify_hostname => $self->{converge_require_ca});
    my %mine = Converge::TLS::ssl_opts(host => $host, port => $port, client => $self->{converge_client},
        require_ca => $self->{converge_require_ca}, state => $state);
    delete $mine{SSL_verifycn_scheme};    # LWP sets it from verify_hostname
    $self->ssl_opts($_ => $mine{$_}) for keys %mine;
    # LWP takes kept-alive connections from conn_cache, which other (unhooked) agents may share:
    # this request sees it through Converge::UserAgent::Checked.
    local $self->{conn_cache} = Converge::UserAgent::Checked->new($self->{conn_cache}, $self->{converge_checked} //= {},
        "$host:$port") if $self->{conn_cache};
    my $r = eval { $self->SUPER::send_request($request, @rest) };
    my $err = $@;
    $self->{ssl_opts} = \%saved;
    die $err if $err;
    if (Converge::TLS::decided($state) && !($state->{verdict} && $state->{verdict}->trusted)) {
        my $nt = Converge::TLS::not_trusted($host, $port, $state, $r->status_line);
        $r->{converge_not_trusted} = $nt;
        $r->header('X-Converge-Not-Trusted' => $nt->message);
    }
    return $r;
}

# The Converge::NotTrusted behind a response (a 500 from LWP), or undef.
sub not_trusted { my ($r) = @_; ref $r ? $r->{converge_not_trusted} : undef }

# The agent's connection cache as one of its HTTPS requests sees it: a connection is taken from
# it only if this agent put it there from a request to the same origin (so its handshake ran the
# converge check for that origin, or resumed a session that did); a connection another agent
# opened (without the hook) is closed instead of used. Everything else goes to the cache.
package Converge::UserAgent::Checked;

our $AUTOLOAD;

sub new {
    my ($class, $cache, $checked, $origin) = @_;
    return bless { cache => $cache, checked => $checked, origin => $origin }, $class;
}

sub deposit {
    my ($self, $type, $key, $conn, @rest) = @_;
    if (_tls($conn)) {
        my $checked = $self->{checked};
        delete @$checked{ grep { !defined $checked->{$_}[0] } keys %$checked };    # connections since freed
        my $entry = $checked->{ Scalar::Util::refaddr($conn) } = [ $conn, $self->{origin} ];
        Scalar::Util::weaken($entry->[0]);
    }
    return $self->{cache}->deposit($type, $key, $conn, @rest);
}

sub withdraw {
    my ($self, $type, $key, @rest) = @_;
    my $conn = $self->{cache}->withdraw($type, $key, @rest);
    return $conn unless _tls($conn);
    my $entry = $self->{checked}{ Scalar::Util::refaddr($conn) };
    return $conn if $entry && defined $entry->[0] && Scalar::Util::refaddr($entry->[0]) == Scalar::Util::refaddr($conn) && $entry->[1] eq $self->{origin};
    $conn->close;    # not checked by this agent for this origin: never used
    return undef;
}

# A TLS connection (type "https", or "http" for a tunnel through a proxy).
sub _tls { my ($conn) = @_; Scalar::Util::blessed($conn) && $conn->isa('IO::Socket::SSL') }

sub AUTOLOAD {
    my $self = shift;
    (my $method = $AUTOLOAD) =~ s/.*:://;
    return if $method eq 'DESTROY';
    return $self->{cache}->$method(@_);
}

1;

__END__

=head1 NAME

Converge::UserAgent - LWP::UserAgent with every HTTPS certificate decided by the notaries

=head1 SYNOPSIS

    use Converge::UserAgent;

    my $ua = Converge::UserAgent->new;               # was: LWP::UserAgent->new
    my $r  = $ua->get('https://www.example.org/');
    if (my $nt = Converge::UserAgent::not_trusted($r)) {
        die $nt->message, "\n";                      # refused before the request was written
    }

    $ua->proxy(https => 'http://proxy:3128');        # CONNECT; the origin is asked about

=head1 DESCRIPTION

A subclass of L<LWP::UserAgent>: for each HTTPS request it binds the converge verify callback
(L<Converge::TLS>) to the request's host and port, so the handshake fails, and no byte of the
request is written, unless the notaries vouch for the server's certificate. The response is
then LWP's usual 500; C<not_trusted($response)> returns the L<Converge::NotTrusted> (with the
verdict) and the header C<X-Converge-Not-Trusted> carries its message.

Options beyond LWP's: C<converge> (a L<Converge::Client>), C<require_ca> (CA validation and
the host name check must pass too).

With C<keep_alive> (or a C<conn_cache>), an HTTPS request reuses only a connection this agent
opened for the same host and port; a connection another agent sharing the cache opened is
closed, not used. A TLS session cache in C<ssl_opts> is keyed by the origin
(L<Converge::TLS>).

=cut
