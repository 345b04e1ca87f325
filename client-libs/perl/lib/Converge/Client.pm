package Converge::Client;
use strict;
use warnings;
use Time::HiRes ();
use Crypt::PRNG ();
use Converge::Error;
use Converge::Fingerprint;
use Converge::Policy;
use Converge::Bundle;
use Converge::Config;
use Converge::Legacy;
use Converge::Extended;
use Converge::Cache;
use Converge::NotaryIO;

our $VERSION = '0.1.0';

my %SHARED;

# A configuration and its open cache connections; keep one per configuration.
#   Converge::Client->new(config => $cfg, clock => sub { time }, random => sub { int rand $_[0] })
sub new {
    my ($class, %a) = @_;
    my $cfg = $a{config} // Converge::Config->load($a{config_dir});
    return bless { config => $cfg, clock => $a{clock} // \&Time::HiRes::time,
        random => $a{random} // sub { $_[0] <= 1 ? 0 : Crypt::PRNG::irand() % $_[0] } }, $class;
}

# Loads a configuration directory (discovered when $dir is undef).
sub load { my ($class, $dir, %a) = @_; $class->new(%a, config => Converge::Config->load($dir)) }

# The client converge() uses for a configuration directory (undef: discovered), loaded once.
sub shared {
    my ($class, $dir) = @_;
    my $key = defined $dir ? "dir:$dir" : 'env:' . ($ENV{ Converge::Config::ENV_VAR() } // '');
    return $SHARED{$key} //= $class->load($dir);
}

sub config { $_[0]{config} }

sub _caches {
    my ($self) = @_;
    return $self->{caches} if $self->{caches};
    my $cfg = $self->{config};
    my (@caches, $writer);
    if (defined $cfg->userdb) {
        push @caches, $writer = Converge::Cache->new($cfg->userdb);
    }
    if (defined $cfg->db) {
        if (!$writer) {
            push @caches, $writer = Converge::Cache->new($cfg->db);
        } elsif (-e $cfg->db) {
            my $ro = eval { Converge::Cache->new($cfg->db, 1) };    # an unreadable shared cache only costs queries
            push @caches, $ro if $ro;
        }
    }
    $self->{writer} = $writer;
    return $self->{caches} = \@caches;
}

# Closes the cache connections (reopened when used again).
sub close {
    my ($self) = @_;
    $_->close for @{ $self->{caches} // [] };
    delete @$self{qw(caches writer)};
    return;
}

sub _forms {
    my ($fingerprint, $der) = @_;
    my $fp = Converge::Fingerprint->parse($fingerprint);
    my @out = ($fp);
    if (defined $der) {
        for my $alg (qw(sha1 sha256)) {
            my $alt = Converge::Fingerprint->of($der, $alg);
            Converge::Error->throw('fingerprint', 'the certificate does not match the fingerprint')
                if $alt->algorithm eq $fp->algorithm && !$alt->equals($fp);
            push @out, $alt unless grep { $_->equals($alt) } @out;
        }
    }
    return \@out;
}

sub _cached {
    my ($self, $loc, $fps) = @_;
    my $now = $self->{clock}->();
    my $life = $self->{config}->cache_lifetime;
    for my $cache (@{ $self->_caches }) {
        for my $fp (@$fps) {
            return 1 if Converge::Policy::cache_decision($cache->lookup($loc, $fp->colon_hex), $now, $life) eq 'hit';
        }
    }
    return 0;
}

# The local cache's answer for a DER certificate, without asking any notary.
sub cached_certificate {
    my ($self, $host, $port, $der) = @_;
    Converge::Legacy::check_target($host, $port);
    return $self->_cached(Converge::Legacy::location($host, $port), _forms(Converge::Fingerprint->of($der)->colon_hex, $der));
}

# A verdict (Converge::Verdict) on ($host, $port, $fingerprint). A local cache hit costs one
# indexed SQLite lookup. Dies with a Converge::Error for bad input or cache IO; notary failures
# are votes. %opt: certificate (the DER, matched by SHA-1 and SHA-256), ip (ask the notaries to
# connect to this address).
sub check {
    my ($self, $host, $port, $fingerprint, %opt) = @_;
    my $t0 = Time::HiRes::time();
    Converge::Legacy::check_target($host, $port);
    my $ip = defined $opt{ip} && $opt{ip} ne '' ? $opt{ip} : undef;
    Converge::Legacy::check_ip($ip) if defined $ip;
    my $fps = _forms($fingerprint, $opt{certificate});
    my $cfg = $self->{config};
    if ($self->_cached(Converge::Legacy::location($host, $port), $fps)) {
        return Converge::Verdict->new(trusted => 1, host => $host, port => $port, fingerprint => $fps->[0]->colon_hex,
            policy => $cfg->agreement, stand_aside => $cfg->stand_aside, from_cache => 1, results => [],
            reason => 'local cache hit', elapsed => Time::HiRes::time() - $t0);
    }
    return $self->_ask($host, $port, $fps, $t0, $ip);
}

# check() with the DER certificate: matched by SHA-1 and SHA-256 both.
sub check_certificate {
    my ($self, $host, $port, $der, %opt) = @_;
    return $self->check($host, $port, Converge::Fingerprint->of($der)->colon_hex, %opt, certificate => $der);
}

sub _ask {
    my ($self, $host, $port, $fps, $t0, $ip) = @_;
    my $cfg = $self->{config};
    my @notaries = $cfg->notaries;
    Converge::Error->throw('config', 'no notaries enabled (looked in ' . Converge::Config::where_read($cfg->notaries_dir) . ')')
        unless @notaries;
    if ($cfg->extended eq 'require') {
        @notaries = grep { $_->offers_extended } @notaries;
        Converge::Error->throw('config', "extended is require but no enabled notary's bundle offers " . Converge::Bundle::EXTENDED_FORMAT)
            unless @notaries;
    }
    my $relay;
    if ($cfg->bounce) {
        Converge::Error->throw('config', 'bounce needs two enabled notaries: one relays, one votes') if @notaries < 2;
        ($relay) = splice @notaries, $self->{random}->(scalar @notaries), 1;
    }
    my @idx = 0 .. $#notaries;
    my $k = $cfg->quorum < @notaries ? $cfg->quorum : scalar @notaries;
    for my $i (0 .. $k - 1) {
        my $j = $i + $self->{random}->(@idx - $i);
        @idx[$i, $j] = @idx[$j, $i];
    }
    my @chosen = map { $notaries[$_] } sort { $a <=> $b } @idx[0 .. $k - 1];
    my $total_deadline = $t0 + $cfg->total_timeout;
    my @jobs;
    for my $b (@chosen) {
        my $ext = $cfg->extended ne 'off' && $b->offers_extended
            ? { keys => [ $b->signing_keys ], nonce => $cfg->extended_nonce, max_skew => $cfg->max_skew, now => $self->{clock},
                log => $b->transparency }
            : undef;
        my $deadline = Time::HiRes::time() + $cfg->notary_timeout;
        $deadline = $total_deadline if $total_deadline < $deadline;
        my $o = { connect_timeout => $cfg->connect_timeout, max_bytes => $cfg->max_response_bytes, relay => $relay,
            relay_dests => [ $b->hosts ], bounce_port => $cfg->bounce_port, ip => $ip };
        my @hosts = $relay ? (($b->hosts)[0]) : $b->hosts;
        my @queries = map { Converge::NotaryIO::HostQuery->new($_, $host, $port, $fps, $o, $ext, $deadline) } @hosts;
        push @jobs, { bundle => $b, queries => \@queries, deadline => $deadline, fallback => $cfg->extended eq 'fallback' && !defined $b->transparency };
    }
    my $settle = $cfg->early_return
        ? sub { my ($results, $pending) = @_;
                Converge::Policy::settled($cfg->agreement, [ map { $_->vote } grep { defined } @$results ], $pending, $cfg->stand_aside) }
        : sub { undef };
    my $run = Converge::NotaryIO::run(\@jobs, $total_deadline, $settle);
    my @ordered;
    for my $i (0 .. $#chosen) {
        my $r = $run->{results}[$i];
        $r //= $run->{timed_out}
            ? Converge::NotaryResult->new(name => $chosen[$i]->name, vote => 'unreachable', kind => 'timeout',
                detail => 'no answer within ' . $cfg->total_timeout . ' s', elapsed => Time::HiRes::time() - $t0)
            : Converge::NotaryResult->new(name => $chosen[$i]->name, vote => 'skipped', kind => 'settled',
                detail => 'verdict settled before this notary answered', elapsed => 0);
        push @ordered, $r;
    }
    my @votes = grep { $_ ne 'skipped' } map { $_->vote } @ordered;
    my $verdict = defined $run->{early} && !$run->{timed_out} ? $run->{early}
        : Converge::Policy::decide($cfg->agreement, \@votes, $cfg->stand_aside);
    if ($verdict && @{ $self->_caches } && $self->{writer}) {
        $self->{writer}->store(Converge::Legacy::location($host, $port), $_->colon_hex, int $self->{clock}->()) for @$fps;
    }
    my $s = grep { $_ eq 'success' } @votes;
    my $aside = $cfg->stand_aside ? 'unreachable stand aside' : 'unreachable count as failure';
    return Converge::Verdict->new(trusted => $verdict ? 1 : 0, host => $host, port => $port, fingerprint => $fps->[0]->colon_hex,
        policy => $cfg->agreement, stand_aside => $cfg->stand_aside, from_cache => 0, results => \@ordered,
        reason => "$s of $k notaries confirm (" . $cfg->agreement . ", $aside)", elapsed => Time::HiRes::time() - $t0,
        relay => $relay ? $relay->name : undef);
}

package Converge::Verdict;
use strict;
use warnings;

# The answer of check(): trusted, host, port, fingerprint, policy, stand_aside, from_cache,
# results (Converge::NotaryResult per notary asked, in file order), reason, elapsed (seconds),
# relay (the bounce relay's name or undef).
sub new { my ($c, %a) = @_; bless { relay => undef, %a }, $c }
for my $f (qw(trusted host port fingerprint policy stand_aside from_cache reason elapsed relay)) {
    no strict 'refs';
    *{$f} = sub { $_[0]{$f} };
}
sub results { @{ $_[0]{results} } }

1;

__END__

=head1 NAME

Converge::Client - a configuration, its caches, and the question to the notaries

=head1 SYNOPSIS

    my $client = Converge::Client->load('/etc/converge');     # undef: discovered
    my $v = $client->check('www.example.org', 443, $fingerprint);
    my $v = $client->check_certificate('www.example.org', 443, $der);
    my $v = $client->check('10.0.0.5', 8443, $fp, ip => '10.0.0.5');
    print $v->trusted ? 'trusted' : 'refused', ': ', $v->reason, "\n";
    $client->close;

=head1 DESCRIPTION

Keep one client per configuration: it holds the SQLite connections (a cache hit is one
indexed lookup). C<check> validates its input (dying with a L<Converge::Error>), answers from
the local cache when it can, else picks C<quorum> notaries at random, asks them all at once
and applies the policy; a trusted verdict is written to the cache. C<new(config =E<gt> $cfg,
clock =E<gt> sub {...}, random =E<gt> sub {...})> takes a L<Converge::Config> and, for tests,
a clock and a random source. C<shared($dir)> is the client C<converge()> uses.

=head2 Converge::Verdict

C<trusted>, C<reason>, C<from_cache>, C<results> (the notaries' parts, in file order),
C<relay>, C<host>, C<port>, C<fingerprint>, C<policy>, C<stand_aside>, C<elapsed>.

=cut
