package Converge::Error;
use strict;
use warnings;
use overload '""' => sub { $_[0]->message }, bool => sub { 1 }, fallback => 1;

our $VERSION = '0.1.0';

my %IO_KINDS = map { $_ => 1 } qw(unreachable pin cache-io timeout);

sub new {
    my ($class, $kind, $detail) = @_;
    return bless { kind => $kind, detail => $detail }, $class;
}

sub throw { my $class = shift; die $class->new(@_) }

sub kind    { $_[0]{kind} }
sub detail  { $_[0]{detail} }
sub message { "converge: $_[0]{kind}: $_[0]{detail}" }
sub family  { $IO_KINDS{ $_[0]{kind} } ? 'io' : 'bad-input' }

# Whether a caught value is a Converge::Error (of the given kind, when one is named).
sub caught {
    my ($class, $e, $kind) = @_;
    return 0 unless ref $e && eval { $e->isa('Converge::Error') };
    return !defined $kind || $e->kind eq $kind;
}

package Converge::NotTrusted;
use strict;
use warnings;
use overload '""' => sub { $_[0]->message }, bool => sub { 1 }, fallback => 1;

# The notaries did not vouch for a TLS peer's certificate (or it could not be checked): raised
# by the TLS hooks before any application data is written.
sub new {
    my ($class, %a) = @_;
    my $what = $a{verdict} ? "certificate not trusted: $a{verdict}{reason}" : "certificate not checked: $a{cause}";
    return bless { %a, message => "converge does not trust $a{host}:$a{port}: $what" }, $class;
}

sub host    { $_[0]{host} }
sub port    { $_[0]{port} }
sub verdict { $_[0]{verdict} }
sub message { $_[0]{message} }

1;

__END__

=head1 NAME

Converge::Error - the typed errors of the converge client

=head1 SYNOPSIS

    my $v = eval { $client->check($host, $port, $fp) };
    if (Converge::Error->caught($@)) {
        warn $@->kind, ": ", $@->detail, " (", $@->family, ")\n";
    }

=head1 DESCRIPTION

Every error the library raises for bad input or local IO is a C<Converge::Error>. C<kind> is
a stable word shared with the other languages' libraries and the test vectors:
C<fingerprint>, C<target>, C<config>, C<bundle>, C<cache-io>, C<vote>, C<response>,
C<signature>, and the IO kinds C<unreachable>, C<pin>, C<timeout>. C<family> is
C<bad-input> or C<io>. Notary failures are not errors: they are votes in the verdict.

C<Converge::NotTrusted> is raised by the TLS hooks (L<Converge::TLS>) when the notaries do
not vouch for a server's certificate; C<verdict> holds the verdict when there was one.

=cut
