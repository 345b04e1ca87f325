package Responder;
# A TLS server on 127.0.0.1 (a forked process) that answers every connection with the raw
# response last given to answer(), or with what handler => sub { my ($request) = @_; ... }
# returns; the vectors' test-only "other" key unless cert/key are given. At most 1000
# connections and 10 minutes; each request read within 5 s. With keep => 1 a connection stays
# open for up to 20 requests (each further one read within 2 s).
use strict;
use warnings;
use File::Temp ();
use IO::Socket::SSL ();
use POSIX ();

use FindBin ();

our $KEYS = "$FindBin::RealBin/../../vectors/keys";

sub new {
    my ($class, %o) = @_;
    my $dir = File::Temp::tempdir('converge-responder-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    my $self = bless { dir => $dir, cert => $o{cert} // "$KEYS/test-other-cert.pem", key => $o{key} // "$KEYS/test-other-key.pem" }, $class;
    my $srv = IO::Socket::SSL->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 16, ReuseAddr => 1,
        SSL_server => 1, SSL_cert_file => $self->{cert}, SSL_key_file => $self->{key}) or die "responder: $IO::Socket::SSL::SSL_ERROR\n";
    $self->{port} = $srv->sockport;
    $self->answer("HTTP/1.0 503 Nothing yet\r\nContent-Length: 0\r\n\r\n");
    my $pid = fork // die "fork: $!\n";
    if (!$pid) {
        alarm 600;
        for (1 .. 1000) {
            my $c = $srv->accept or next;
            for my $nth (1 .. ($o{keep} ? 20 : 1)) {
                my $req = eval {
                    local $SIG{ALRM} = sub { die "timeout\n" };
                    alarm($nth == 1 ? 5 : 2);
                    my $buf = '';
                    $buf .= $_ while $buf !~ /\r\n\r\n/ && defined($_ = <$c>);
                    my ($len) = $buf =~ /^Content-Length: *([0-9]+)/mi;
                    read($c, my $body, $len // 0) if $len;
                    alarm 600;
                    $buf . ($body // '');
                };
                last unless defined $req && length $req;
                # counted before it is answered: a client that has the answer sees the count
                open(my $n, '>>', "$dir/count") or die $!;
                print {$n} "1\n";
                close $n;
                open(my $fh, '<:raw', "$dir/reply") or die $!;
                print {$c} $o{handler} ? $o{handler}->($req) : do { local $/; <$fh> };
                $c->flush;
            }
            $c->close(SSL_fast_shutdown => 1);
        }
        POSIX::_exit(0);
    }
    close $srv;
    $self->{pid} = $pid;
    return $self;
}

sub port { $_[0]{port} }
sub cert { $_[0]{cert} }
sub key  { $_[0]{key} }

# Every connection from now on gets $response.
sub answer {
    my ($self, $response) = @_;
    open(my $fh, '>:raw', "$self->{dir}/reply.new") or die $!;
    print {$fh} $response;
    close $fh;
    rename "$self->{dir}/reply.new", "$self->{dir}/reply" or die $!;
    return;
}

# The number of requests read so far.
sub count {
    my ($self) = @_;
    open(my $fh, '<', "$self->{dir}/count") or return 0;
    my @l = <$fh>;
    return scalar @l;
}

sub stop {
    my ($self) = @_;
    my $pid = delete $self->{pid} or return;
    kill 'TERM', $pid;
    waitpid $pid, 0;
    return;
}

sub DESTROY { $_[0]->stop }

1;
