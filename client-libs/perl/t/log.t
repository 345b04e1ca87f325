# The transparency log, live: a real `notary serve` keeps its log (on by default) and
# `notary bundle` names it in the bundle. A match with its proof is trusted, directly and
# through a relay that passes answers as they are (a TLS server in a forked process with the
# notary's own certificate, relaying to it); twins: the relay strips the member, moves the
# index, changes the checkpoint's root or the logged entry, and that notary's vote is a failure
# of the kind the check names.
use strict;
use warnings;
use Test::More;
use FindBin ();
use lib "$FindBin::RealBin/../lib";
use File::Temp ();
use IO::Socket::INET ();
use IO::Socket::SSL ();
use JSON::XS ();
use POSIX ();
use Converge::Client;
use Converge::Fingerprint;

my $ROOT = "$FindBin::RealBin/../../..";
my $NOTARY = "$ROOT/.venv/bin/notary";
plan skip_all => "no $NOTARY (make setup)" unless -x $NOTARY;

my $tmp = File::Temp->newdir('converge-perl-log-XXXXXX', TMPDIR => 1);
my $data = "$tmp/data";
my $port = do { my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 1); $s->sockport };
my $notary = fork // die "fork: $!";
if (!$notary) {
    open STDIN, '<', '/dev/null';
    open STDOUT, '>>', "$tmp/notary.log";
    open STDERR, '>&', \*STDOUT;
    exec($NOTARY, 'serve', '--data-dir', $data, '--listen', "127.0.0.1:$port", '--allow-target', '127.0.0.0/8')
        or POSIX::_exit(127);
}
END { if ($notary) { kill 'TERM', $notary; waitpid $notary, 0 } }
my $up = 0;
for (1 .. 300) {    # at most 30 s
    last if $up = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port") && -e "$data/notary.key";
    select undef, undef, undef, 0.1;
}
ok($up, "a real notary serves on $port with its log") or BAIL_OUT('the notary did not start');
my $bundle = JSON::XS->new->utf8->decode(scalar qx('$NOTARY' bundle --data-dir '$data' --host 127.0.0.1 --ssl-port $port --name 'Org Log'));
ok($bundle->{transparency}, 'notary bundle names the log');

my %rewrite = (
    strip => sub { my $i = index $_[0], ',"transparency":'; $i < 0 ? $_[0] : substr($_[0], 0, $i) . '}' },
    index => sub { (my $b = $_[0]) =~ s/"index":(\d+)/'"index":' . ($1 + 1)/e; $b },
    root  => sub { (my $b = $_[0]) =~ s/("checkpoint":"[^"\\]*\\n[0-9]+\\n)(.)/$1 . ($2 eq 'A' ? 'B' : 'A')/e; $b },
    entry => sub { (my $b = $_[0]) =~ s/("entry":")(.)/$1 . ($2 eq 'e' ? 'f' : 'e')/e; $b },
    pass  => sub { $_[0] },
);

# a relay in a child process: TLS with the notary's certificate, each answer rewritten
sub relay {
    my ($mode) = @_;
    my $srv = IO::Socket::SSL->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 8, ReuseAddr => 1,
        SSL_server => 1, SSL_cert_file => "$data/notary.pem", SSL_key_file => "$data/notary.key") or die "relay: $IO::Socket::SSL::SSL_ERROR";
    my $pid = fork // die "fork: $!";
    return ($pid, $srv->sockport) if $pid;
    alarm 60;
    while (my $c = $srv->accept) {
        my $req = '';
        while (sysread($c, my $buf, 65536)) {
            $req .= $buf;
            my $h = index $req, "\r\n\r\n";
            last if $h >= 0 && $req =~ /\r\nContent-Length: *(\d+)/i && length($req) >= $h + 4 + $1;
        }
        my $up = IO::Socket::SSL->new(PeerAddr => "127.0.0.1:$port", SSL_verify_mode => IO::Socket::SSL::SSL_VERIFY_NONE(), Timeout => 15);
        my $resp = '';
        if ($up) {
            print {$up} $req;
            while (sysread($up, my $buf, 65536)) { $resp .= $buf }
            close $up;
        }
        my ($head, $body) = split /\r\n\r\n/, $resp, 2;
        $body = $rewrite{$mode}->($body // '');
        $head =~ s/\r\nContent-Length: *\d+/"\r\nContent-Length: " . length $body/ie if defined $head;
        print {$c} ($head // '') . "\r\n\r\n" . $body;
        $c->close(SSL_fast_shutdown => 1);
    }
    POSIX::_exit(0);
}

my $pem = do { open my $fh, '<', "$data/notary.pem" or die $!; local $/; <$fh> };
my $der = Converge::Bundle::der_of_pem($pem);
my $fp = Converge::Fingerprint->of($der, 'sha256')->colon_hex;
for my $case (['a match with a valid proof, asked directly', undef, 1, 'match'],
              ['the same through a relay that passes it as it is', 'pass', 1, 'match'],
              ['twin: a relay strips the member', 'strip', 0, 'log-missing'],
              ['twin: a relay moves the index', 'index', 0, 'log-proof'],
              ["twin: a relay changes the checkpoint's root", 'root', 0, 'log-checkpoint'],
              ['twin: a relay changes the logged entry', 'entry', 0, 'log-entry']) {
    my ($what, $mode, $trusted, $kind) = @$case;
    my ($pid, $rport) = $mode ? relay($mode) : (undef, $port);
    my $dir = File::Temp->newdir('converge-perl-logcfg-XXXXXX', TMPDIR => 1);
    mkdir "$dir/notaries-available";
    mkdir "$dir/notaries-enabled";
    my %b = %$bundle;
    $b{hosts} = [ { %{ $bundle->{hosts}[0] }, ssl_port => 0 + $rport } ];
    open my $fh, '>', "$dir/notaries-available/log.notary" or die $!;
    print {$fh} JSON::XS->new->utf8->encode(\%b);
    close $fh;
    symlink '../notaries-available/log.notary', "$dir/notaries-enabled/log.notary" or die $!;
    open $fh, '>', "$dir/converge.config" or die $!;
    print {$fh} '{"db": null, "connect-timeout": 3, "notary-timeout": 12, "total-timeout": 15}';
    close $fh;
    my $v = Converge::Client->load("$dir")->check('127.0.0.1', $port, $fp);
    is_deeply([ map { $_->kind } $v->results ], [$kind], "$what: $kind") or diag(join ' ', map { $_->detail } $v->results);
    is(!!$v->trusted, !!$trusted, "$what: " . ($trusted ? 'trusted' : 'not trusted'));
    if ($pid) { kill 'TERM', $pid; waitpid $pid, 0 }
}
done_testing;
