package Converge::UserAgent;
use strict;
use warnings;
use parent 'LWP::UserAgent';
use LWP::Protocol::https ();
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

=cut
