package World;
# Fake notaries, HTTPS sites and CONNECT proxies in a process of their own
# (client-libs/conformance/fake_world.py), real TLS on 127.0.0.1 with the vectors' test keys.
use strict;
use warnings;
use FindBin ();
use File::Temp ();
use IPC::Open2 ();
use JSON::XS ();

our $ROOT = "$FindBin::RealBin/../../..";
my $JS = JSON::XS->new->utf8;

sub new {
    my ($class, @args) = @_;
    my $pid = IPC::Open2::open2(my $out, my $in, "$ROOT/.venv/bin/python", "$ROOT/client-libs/conformance/fake_world.py", @args);
    my $line = <$out>;
    die "fake_world.py did not start\n" unless defined $line;
    return bless { pid => $pid, out => $out, in => $in, info => $JS->decode($line) }, $class;
}

sub info { $_[0]{info} }

sub ask {
    my ($self, $command) = @_;
    my $in = $self->{in};
    print {$in} "$command\n";
    $in->flush;
    my $line = readline $self->{out};
    die "fake_world.py did not answer $command\n" unless defined $line;
    return $JS->decode($line);
}

sub stop {
    my ($self) = @_;
    return unless $self->{pid};
    my $in = $self->{in};
    print {$in} "quit\n";
    close $in;
    close $self->{out};
    waitpid delete $self->{pid}, 0;
    return;
}

sub DESTROY { $_[0]->stop }

# A configuration directory enabling notaries @$indices (all by default).
sub config_dir {
    my ($self, $settings, %o) = @_;
    my $dir = File::Temp::tempdir('converge-perl-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    mkdir "$dir/notaries-available";
    mkdir "$dir/notaries-enabled";
    my $i = -1;
    for my $n (@{ $self->{info}{notaries} }) {
        $i++;
        next if $o{indices} && !grep { $_ == $i } @{ $o{indices} };
        (my $file = sprintf('%02d-%s.notary', $i, $n->{name})) =~ s/ /-/g;
        open(my $fh, '>:raw', "$dir/notaries-available/$file") or die $!;
        my $text = $o{extended} ? $n->{bundle_extended} : $n->{bundle};
        utf8::encode($text);
        print $fh $text;
        close $fh;
        symlink("../notaries-available/$file", "$dir/notaries-enabled/$file") or die $!;
    }
    my %s = ('connect-timeout' => 2, 'notary-timeout' => 2, 'total-timeout' => 4, %{ $settings // {} });
    open(my $fh, '>:raw', "$dir/converge.config") or die $!;
    print $fh $JS->encode(\%s);
    close $fh;
    return $dir;
}

1;
