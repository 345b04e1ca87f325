package Converge::Policy;
use strict;
use warnings;
use Converge::Error;
use JSON::XS ();

our $VERSION = '0.1.0';

# Votes, consensus policies and the local-cache rule (pure functions). With stand-aside on,
# unreachable notaries do not count; off, they count as failures. With n counted notaries and s
# successes: consensus s == n, majority s >= ceil(n/2), minority s >= 1; never trusted
# without a success.

use constant CACHE_FUTURE_SKEW        => 300;
use constant CACHE_MILLISECONDS_ABOVE => 100_000_000_000;

# Accepts the three policy names, any case, surrounding space ignored.
sub parse {
    my ($text) = @_;
    my $p = lc($text // '');
    $p =~ s/\A\s+|\s+\z//g;
    return $p if $p =~ /\A(?:consensus|majority|minority)\z/;
    Converge::Error->throw('config', 'notary-agreement must be consensus, majority or minority, not '
        . JSON::XS->new->allow_nonref->encode($text));
}

sub _trusted {
    my ($p, $s, $f, $u, $aside) = @_;
    my $counted = $s + $f + ($aside ? 0 : $u);
    return 0 if $s < 1;
    return $s == $counted ? 1 : 0 if $p eq 'consensus';
    return $s >= int(($counted + 1) / 2) ? 1 : 0 if $p eq 'majority';
    return 1;
}

sub _count {
    my ($votes) = @_;
    my ($s, $f, $u) = (0, 0, 0);
    for my $v (@$votes) {
        if    ($v eq 'success')     { $s++ }
        elsif ($v eq 'failure')     { $f++ }
        elsif ($v eq 'unreachable') { $u++ }
        elsif ($v ne 'skipped')     { Converge::Error->throw('vote', "unknown vote \"$v\"") }
    }
    return ($s, $f, $u);
}

# The verdict (1 or 0) for a complete set of votes.
sub decide {
    my ($policy, $votes, $aside) = @_;
    return _trusted($policy, _count($votes), $aside);
}

# The verdict when no outcome of the pending notaries can change it, else undef.
sub settled {
    my ($policy, $votes, $pending, $aside) = @_;
    my ($s, $f, $u) = _count($votes);
    my $first = _trusted($policy, $s, $f, $u + $pending, $aside);
    for my $ps (0 .. $pending) {
        for my $pf (0 .. $pending - $ps) {
            return undef if _trusted($policy, $s + $ps, $f + $pf, $u + $pending - $ps - $pf, $aside) != $first;
        }
    }
    return $first;
}

# "hit", "stale" or "miss" for a stored timestamp (undef: none) at $now; $lifetime undef = forever.
sub cache_decision {
    my ($ts, $now, $lifetime) = @_;
    return 'miss' unless defined $ts;
    $ts = int($ts / 1000) if $ts > CACHE_MILLISECONDS_ABOVE;
    my $age = $now - $ts;
    return 'stale' if $age < -CACHE_FUTURE_SKEW;
    return 'stale' if defined $lifetime && $age > $lifetime;
    return 'hit';
}

1;

__END__

=head1 NAME

Converge::Policy - votes, consensus policies and the local-cache rule

=head1 DESCRIPTION

Pure functions. C<decide($policy, \@votes, $stand_aside)> gives the verdict for complete
votes (C<success>, C<failure>, C<unreachable>, C<skipped>); C<settled($policy, \@votes,
$pending, $stand_aside)> the verdict when no pending answer can change it, else C<undef>;
C<cache_decision($timestamp, $now, $lifetime)> C<hit>, C<stale> or C<miss>. With stand-aside
on, unreachable notaries do not count; consensus needs every counted notary, majority at least
half, minority one; never trusted without a success.

=cut
