package Converge::HTTP::Tiny;
use strict;
use warnings;
use parent 'HTTP::Tiny';
use URI ();
use Converge::TLS;

our $VERSION = '0.1.0';

# HTTP::Tiny whose HTTPS connections the notaries decide (proxies included: the origin is asked
# about). Options beyond HTTP::Tiny's: converge (a Converge::Client), require_ca.
sub new {
    my ($class, %a) = @_;
    my $client = delete $a{converge};
    my $require_ca = delete $a{require_ca};
    my $self = $class->SUPER::new(%a);
    $self->{converge_client} = $client;
    $self->{converge_require_ca} = $require_ca ? 1 : 0;
    return $self;
}

sub request {
    my ($self, $method, $url, @rest) = @_;
    my $uri = URI->new($url);
    return $self->SUPER::request($method, $url, @rest) unless ($uri->scheme // '') eq 'https';
    my ($host, $port) = ($uri->host, $uri->port);
    my $state = {};
    my $saved = $self->{SSL_options};
    $self->{SSL_options} = { %{ $saved || {} }, Converge::TLS::ssl_opts(host => $host, port => $port,
        client => $self->{converge_client}, require_ca => $self->{converge_require_ca}, state => $state) };
    my $r = eval { $self->SUPER::request($method, $url, @rest) };
    my $err = $@;
    $self->{SSL_options} = $saved;
    die $err if $err;
    if (Converge::TLS::decided($state) && !($state->{verdict} && $state->{verdict}->trusted)) {
        $r->{converge_not_trusted} = Converge::TLS::not_trusted($host, $port, $state, $r->{content});
    }
    return $r;
}

1;

__END__

=head1 NAME

Converge::HTTP::Tiny - HTTP::Tiny with every HTTPS certificate decided by the notaries

=head1 SYNOPSIS

    use Converge::HTTP::Tiny;

    my $http = Converge::HTTP::Tiny->new;            # was: HTTP::Tiny->new
    my $r = $http->get('https://www.example.org/');
    die $r->{converge_not_trusted}->message, "\n" if $r->{converge_not_trusted};

=head1 DESCRIPTION

A subclass of L<HTTP::Tiny>: each HTTPS request carries C<SSL_options> with the converge verify
callback bound to its host and port (L<Converge::TLS>), so the handshake fails before the
request is written unless the notaries vouch for the certificate. The response is then
HTTP::Tiny's 599; C<< $r->{converge_not_trusted} >> holds the L<Converge::NotTrusted>.

=cut
