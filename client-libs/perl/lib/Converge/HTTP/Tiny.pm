package Converge::HTTP::Tiny;
use strict;
use warnings;
use parent 'HTTP::Tiny';
use Converge::TLS;

our $VERSION = '0.1.0';

# HTTP::Tiny whose HTTPS connections the notaries decide (proxies included: the origin is asked
# about). Options beyond HTTP::Tiny's: converge (a Converge::Client), require_ca.
sub new {
    my ($class, %a) = @_;
    my $client = delete $a{converge};
    my $require_ca = delete $a{require_ca};
    HTTP::Tiny->can('_open_handle') or die "Converge::HTTP::Tiny needs an HTTP::Tiny that opens connections in _open_handle\n";
    my $self = $class->SUPER::new(%a);
    $self->{converge_client} = $client;
    $self->{converge_require_ca} = $require_ca ? 1 : 0;
    return $self;
}

sub request {
    my ($self, $method, $url, @rest) = @_;
    my $r = $self->SUPER::request($method, $url, @rest);
    my $last = delete $self->{converge_last};
    if ($last && Converge::TLS::decided($last->{state}) && !($last->{state}{verdict} && $last->{state}{verdict}->trusted)) {
        $r->{converge_not_trusted} = Converge::TLS::not_trusted($last->{host}, $last->{port}, $last->{state}, $r->{content});
    }
    return $r;
}

# Every new connection, first request or redirect hop, is opened with the converge verify
# callback bound to that connection's own origin (host and port); a kept-alive connection is
# reused by HTTP::Tiny only for the same scheme, host and port it was checked for.
sub _open_handle {
    my ($self, $request, $scheme, $host, $port, @rest) = @_;
    return $self->SUPER::_open_handle($request, $scheme, $host, $port, @rest) unless $scheme eq 'https';
    my $state = {};
    $self->{converge_last} = { host => $host, port => $port, state => $state };
    local $self->{SSL_options} = { %{ $self->{SSL_options} || {} }, Converge::TLS::ssl_opts(host => $host, port => $port,
        client => $self->{converge_client}, require_ca => $self->{converge_require_ca}, state => $state) };
    return $self->SUPER::_open_handle($request, $scheme, $host, $port, @rest);
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

A subclass of L<HTTP::Tiny>: every HTTPS connection it opens, for the first URL and for each
redirect hop, carries C<SSL_options> with the converge verify callback bound to that
connection's own host and port (L<Converge::TLS>), so the handshake fails before the request
is written unless the notaries vouch for the certificate for that origin. The response is then
HTTP::Tiny's 599; C<< $r->{converge_not_trusted} >> holds the L<Converge::NotTrusted> of the
refused hop.

=cut
