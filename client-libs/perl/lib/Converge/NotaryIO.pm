package Converge::NotaryIO;
use strict;
use warnings;
use Time::HiRes ();
use IO::Select ();
use Converge::Error;
use Converge::Legacy;
use Converge::Extended;

our $VERSION = '0.1.0';

# Asking notaries over the network: every host of every chosen notary at once, from one Perl
# thread, with non-blocking sockets and select (Converge::NotaryIO::HostQuery). Within a notary
# the first definitive answer wins; the verdict is decided as soon as no pending answer can
# change it.

my %DEFINITIVE = map { $_ => 1 } qw(listed status-only mismatch not-listed match);
my %SEVERITY = ((map { $_ => 3 } qw(signature response malformed unknown-key bad-signature wrong-target
    nonce-mismatch stale)), pin => 2);

sub now { Time::HiRes::time() }

# The CONNECT head sent to a bounce relay for one notary's hosts.
sub connect_head {
    my ($dests, $port) = @_;
    my $first = $dests->[0]->host;
    my @lines = ("CONNECT $first:$port HTTP/1.1", "Host: $first");
    push @lines, map { 'X-Convergence-Notary: ' . $_->host . "+$port" } @$dests[1 .. $#$dests];
    return join("\r\n", @lines) . "\r\n\r\n";
}

# Which destination a relay connected to (dies with a message when none).
sub parse_connect_reply {
    my ($head, $dests) = @_;
    my @lines = split /\r\n/, $head;
    my @parts = split / /, $lines[0] // '', 3;
    die 'relay refused the tunnel: "' . substr($lines[0] // '', 0, 80) . "\"\n"
        unless @parts >= 2 && $parts[0] =~ m{\AHTTP/1\.} && $parts[1] eq '200';
    my $connected;
    for my $line (@lines[1 .. $#lines]) {
        my $colon = index($line, ':');
        my $name = $colon < 0 ? $line : substr($line, 0, $colon);
        $connected = lc Converge::Legacy::py_strip($colon < 0 ? '' : substr($line, $colon + 1))
            if lc(Converge::Legacy::py_strip($name)) eq 'x-convergence-notary';
    }
    unless (defined $connected) {
        return $dests->[0] if @$dests == 1;
        die "relay did not name the notary host it connected to\n";
    }
    my ($host) = split /\+/, $connected, 2;
    for my $d (@$dests) {
        return $d if lc($d->host) eq $host || lc($d->host) eq $connected;
    }
    die "relay connected to an unknown notary host \"$connected\"\n";
}

# Asks the chosen notaries at once. $jobs: per notary { bundle, queries, deadline, fallback };
# $settle->(\@results, $pending) decides early (undef: go on). Returns { results (a
# Converge::NotaryResult or undef per job), timed_out, early }.
sub run {
    my ($jobs, $total_deadline, $settle) = @_;
    my $t0 = now();
    my @results = (undef) x @$jobs;
    my ($early, $timed_out) = (undef, 0);
    while (1) {
        my $now = now();
        my $pending = 0;
        for my $i (0 .. $#$jobs) {
            next if defined $results[$i];
            my $job = $jobs->[$i];
            for my $qi (0 .. $#{ $job->{queries} }) {
                my $q = $job->{queries}[$qi];
                # a connect step that ran out of time is an unreachable host; the notary's own
                # deadline leaves what is still pending unanswered (a timeout, below)
                $q->expire if !$q->done && $now >= $q->next_deadline && $q->next_deadline < $job->{deadline};
                if ($q->done && $job->{fallback} && $q->{ext} && $q->outcome->kind eq 'status'
                    && Converge::Extended::not_offered($q->outcome->status)) {
                    $job->{queries}[$qi] = $q->legacy_twin;
                }
            }
            $results[$i] = _notary_result($job, $now, $t0);
            if (defined $results[$i]) {
                $_->close for @{ $job->{queries} };
                $early = $settle->(\@results, scalar grep { !defined } @results);
                last if defined $early;
            } else {
                $pending++;
            }
        }
        last if defined $early || !$pending;
        if ($now >= $total_deadline) {
            $timed_out = 1;
            last;
        }
        my ($rd, $wr) = (IO::Select->new, IO::Select->new);
        my $next = $total_deadline;
        for my $i (0 .. $#$jobs) {
            next if defined $results[$i];
            my $job = $jobs->[$i];
            $next = $job->{deadline} if $job->{deadline} < $next;
            for my $q (@{ $job->{queries} }) {
                next if $q->done;
                my ($s, $r, $w) = $q->waits_on;
                $next = $q->next_deadline if $q->next_deadline < $next;
                next unless $s;
                $rd->add($s) if $r;
                $wr->add($s) if $w;
            }
        }
        my $wait = $next - now();
        $wait = 0 if $wait < 0;
        if ($rd->count || $wr->count) {
            IO::Select->select($rd, $wr, undef, $wait);
        } else {
            Time::HiRes::sleep($wait < 0.05 ? $wait : 0.05);
        }
        for my $i (0 .. $#$jobs) {
            next if defined $results[$i];
            $_->step for @{ $jobs->[$i]{queries} };
        }
    }
    $_->close for map { @{ $_->{queries} } } @$jobs;
    return { results => \@results, timed_out => $timed_out, early => $early };
}

sub _notary_result {
    my ($job, $now, $t0) = @_;
    my @done = grep { $_->done } @{ $job->{queries} };
    my ($winner) = grep { $DEFINITIVE{ $_->outcome->kind } } @done;
    return undef if !$winner && @done < @{ $job->{queries} } && $now < $job->{deadline};
    unless ($winner) {
        for my $q (@done) {
            $winner = $q if !$winner || ($SEVERITY{ $q->outcome->kind } // 0) > ($SEVERITY{ $winner->outcome->kind } // 0);
        }
    }
    my $elapsed = $now - $t0;
    return Converge::NotaryResult->new(name => $job->{bundle}->name, vote => 'unreachable', kind => 'timeout',
        detail => 'no answer in time', elapsed => $elapsed) unless $winner;
    my $o = $winner->outcome;
    return Converge::NotaryResult->new(name => $job->{bundle}->name, vote => $o->vote, kind => $o->kind, status => $o->status,
        host => $winner->{label}, detail => $o->detail, elapsed => $elapsed, protocol => $winner->{protocol}, answer => $o->answer);
}

package Converge::NotaryResult;
use strict;
use warnings;

# One logical notary's part in a verdict: name, vote (success, failure, unreachable, skipped),
# kind, status (HTTP or undef), host (the host that answered), detail, elapsed (seconds),
# protocol (convergence-v1, converge-answer/1 or undef) and answer (the signed extended body).
sub new { my ($c, %a) = @_; bless { host => '', status => undef, protocol => undef, answer => undef, %a }, $c }
for my $f (qw(name vote kind status host detail elapsed protocol answer)) {
    no strict 'refs';
    *{$f} = sub { $_[0]{$f} };
}

package Converge::NotaryIO::HostQuery;
use strict;
use warnings;
use Socket qw(SOCK_STREAM IPPROTO_TCP TCP_NODELAY SOL_SOCKET SO_ERROR);
use IO::Handle ();
use IO::Socket::SSL ();
use Net::SSLeay ();
use Errno ();
use Converge::Bundle;
use Converge::Fingerprint;

# One question to one physical notary host, as a non-blocking state machine: connect, (through
# a bounce relay: CONNECT and its reply head,) TLS, the pin checked before anything is sent, the
# request, the response read until the server closes. Every step is bounded by the connect and
# notary deadlines.

sub new {
    my ($class, $nh, $target, $port, $wanted, $o, $ext, $deadline) = @_;
    my $self = bless { nh => $nh, target => $target, port => $port, wanted => $wanted, o => $o, ext => $ext,
        deadline => $deadline, state => 'connect', buffer => '', written => 0, nonce => '', asked => $wanted->[0],
        protocol => $ext ? Converge::Bundle::EXTENDED_FORMAT : Converge::Bundle::LEGACY_FORMAT }, $class;
    my $relay = $o->{relay};
    $self->{label} = $relay ? $nh->host . ":$o->{bounce_port} via " . $relay->name : $nh->host . ':' . $nh->ssl_port;
    $self->{connect_deadline} = _min($deadline, Converge::NotaryIO::now() + $o->{connect_timeout});
    my $ok = eval {
        if ($ext) {
            $self->{asked} = Converge::Extended::request_fingerprint($wanted);
            $self->{nonce} = $ext->{nonce} ? Converge::Extended::new_nonce() : '';
            $self->{request} = Converge::Extended::request_bytes($target, $port, $self->{asked}, $self->{nonce}, $o->{ip},
                $ext->{log} ? 1 : 0);
        } else {
            $self->{request} = Converge::Legacy::request_bytes($target, $port, $self->{asked}, $o->{ip});
        }
        1;
    };
    unless ($ok) {
        my $e = $@;
        die $e unless Converge::Error->caught($e);
        $self->{outcome} = Converge::Outcome->failure_of($e, undef);
        return $self;
    }
    my ($host, $p) = $relay ? (($relay->hosts)[0]->host, ($relay->hosts)[0]->http_port) : ($nh->host, $nh->ssl_port);
    my ($err, @ai) = Socket::getaddrinfo($host, $p, { socktype => SOCK_STREAM });
    return $self->_unreachable("$self->{label}: $err") if $err || !@ai;
    my $s;
    socket($s, $ai[0]{family}, SOCK_STREAM, 0) or return $self->_unreachable("$self->{label}: socket: $!");
    $s->blocking(0);
    setsockopt($s, IPPROTO_TCP, TCP_NODELAY, 1);
    if (!connect($s, $ai[0]{addr}) && !$!{EINPROGRESS}) {
        return $self->_unreachable("$self->{label}: $!");
    }
    $self->{sock} = $s;
    return $self;
}

sub _min { $_[0] < $_[1] ? $_[0] : $_[1] }

sub _unreachable {
    my ($self, $detail) = @_;
    $self->{outcome} = Converge::Outcome->new('unreachable', 'unreachable', undef, $detail);
    $self->close;
    return $self;
}

sub close {
    my ($self) = @_;
    my $s = delete $self->{sock} or return;
    if (ref $s && eval { $s->isa('IO::Socket::SSL') }) {
        $s->close(SSL_no_shutdown => 1);
    } else {
        CORE::close($s);
    }
    return;
}

sub done    { defined $_[0]{outcome} }
sub outcome { $_[0]{outcome} }

# The socket and whether to wait for reading, writing.
sub waits_on {
    my ($self) = @_;
    my $st = $self->{state};
    return ($self->{sock}, 0, 1) if $st eq 'connect' || $st eq 'relay-write' || $st eq 'write';
    return ($self->{sock}, $self->{want} ne 'write', $self->{want} eq 'write') if $st eq 'tls';
    return ($self->{sock}, 1, 0);
}

# The time by which this query must progress.
sub next_deadline {
    my ($self) = @_;
    return $self->{state} =~ /\A(?:connect|relay-write|relay-read|tls)\z/ ? $self->{connect_deadline} : $self->{deadline};
}

# Called when the clock passed next_deadline().
sub expire {
    my ($self) = @_;
    $self->_unreachable("$self->{label}: timed out") unless $self->done;
    return;
}

# One client context for every notary connection: IO::Socket::SSL would otherwise build one per
# connection and load the system's CA store into it each time (~25 ms), which the pin makes moot.
my $CTX;

sub _context {
    return $CTX //= IO::Socket::SSL::SSL_Context->new(
        SSL_verify_mode => IO::Socket::SSL::SSL_VERIFY_NONE(),    # the bundle's pin decides, before sending
        SSL_version     => 'SSLv23:!SSLv3:!TLSv1:!TLSv1_1',
        SSL_ca_file     => undef,
        SSL_ca_path     => undef,
    ) // die 'TLS context: ' . IO::Socket::SSL::errstr() . "\n";
}

sub _start_tls {
    my ($self) = @_;
    my $host = $self->{nh}->host;
    my $ssl = IO::Socket::SSL->start_SSL($self->{sock},
        SSL_startHandshake => 0,
        SSL_reuse_ctx      => _context(),
        SSL_hostname       => ($host =~ /\A[0-9.]+\z|:/ ? '' : $host),
    );
    return $self->_unreachable("$self->{label}: TLS: " . IO::Socket::SSL::errstr()) unless $ssl;
    $self->{sock} = $ssl;
    $self->{state} = 'tls';
    $self->{want} = 'write';
    return $self->step;
}

# Progresses as far as the socket allows without blocking.
sub step {
    my ($self) = @_;
    return if $self->done || !$self->{sock};
    my $s = $self->{sock};
    my $st = $self->{state};
    if ($st eq 'connect') {
        my $err = getsockopt($s, SOL_SOCKET, SO_ERROR);
        my $code = defined $err ? unpack('i', $err) : 0;
        if ($code) {
            local $! = $code;
            return $self->_unreachable("$self->{label}: $!");
        }
        return unless defined getpeername($s);    # still connecting
        if ($self->{o}{relay}) {
            $self->{head} = Converge::NotaryIO::connect_head($self->{o}{relay_dests}, $self->{o}{bounce_port});
            $self->{state} = 'relay-write';
            return $self->step;
        }
        return $self->_start_tls;
    }
    if ($st eq 'relay-write') {
        my $n = syswrite($s, $self->{head}, length($self->{head}) - $self->{written}, $self->{written});
        return if !defined $n && $!{EAGAIN};
        return $self->_unreachable("$self->{label}: relay: write failed: $!") unless defined $n;
        $self->{written} += $n;
        if ($self->{written} >= length $self->{head}) {
            $self->{written} = 0;
            $self->{state} = 'relay-read';
        }
        return;
    }
    if ($st eq 'relay-read') {
        while (substr($self->{buffer}, -4) ne "\r\n\r\n") {
            return $self->_unreachable('relay reply head too large') if length $self->{buffer} >= 8192;
            my $n = sysread($s, my $c, 1);    # one byte at a time: TLS starts right after the head
            return if !defined $n && $!{EAGAIN};
            return $self->_unreachable('relay closed the connection') unless $n;
            $self->{buffer} .= $c;
        }
        my $nh = eval { Converge::NotaryIO::parse_connect_reply($self->{buffer}, $self->{o}{relay_dests}) };
        return $self->_unreachable($@ =~ s/\s+\z//r) unless $nh;
        $self->{nh} = $nh;
        $self->{label} = $nh->host . ":$self->{o}{bounce_port} via " . $self->{o}{relay}->name;
        $self->{buffer} = '';
        return $self->_start_tls;
    }
    if ($st eq 'tls') {
        unless ($s->connect_SSL) {
            my $e = $IO::Socket::SSL::SSL_ERROR;
            if ($e == IO::Socket::SSL::SSL_WANT_READ()) { $self->{want} = 'read'; return }
            if ($e == IO::Socket::SSL::SSL_WANT_WRITE()) { $self->{want} = 'write'; return }
            return $self->_unreachable("$self->{label}: TLS: " . ($e || 'handshake failed'));
        }
        my $x = $s->peer_certificate;
        my $der = $x ? Converge::Bundle::der_of_pem(Net::SSLeay::PEM_get_string_X509($x)) : undef;
        unless (defined $der && Converge::Fingerprint->of($der)->equals($self->{nh}->pin)) {
            $self->{outcome} = Converge::Outcome->new('failure', 'pin', undef, "$self->{label} presented a certificate other than the pinned one");
            $self->close;
            return;
        }
        $self->{state} = 'write';
        return $self->step;
    }
    if ($st eq 'write') {
        my $n = syswrite($s, $self->{request}, length($self->{request}) - $self->{written}, $self->{written});
        unless (defined $n) {
            return if $!{EAGAIN} || $IO::Socket::SSL::SSL_ERROR == IO::Socket::SSL::SSL_WANT_WRITE();
            return $self->_unreachable("$self->{label}: write failed: $!");
        }
        $self->{written} += $n;
        $self->{state} = 'read' if $self->{written} >= length $self->{request};
        return;
    }
    # read until the server closes
    while (1) {
        my $n = sysread($s, my $chunk, 65536);
        if (!defined $n) {
            return if $!{EAGAIN} || $IO::Socket::SSL::SSL_ERROR == IO::Socket::SSL::SSL_WANT_READ();
            return $self->_finish if length $self->{buffer};    # a close without close_notify after some data
            return $self->_unreachable("$self->{label}: " . ($IO::Socket::SSL::SSL_ERROR || $!));
        }
        return $self->_finish if $n == 0;
        $self->{buffer} .= $chunk;
        if (length $self->{buffer} > $self->{o}{max_bytes}) {
            $self->{outcome} = Converge::Outcome->new('failure', 'response', undef, "response larger than $self->{o}{max_bytes} bytes");
            $self->close;
            return;
        }
    }
}

sub _finish {
    my ($self) = @_;
    $self->close;
    my $outcome = eval { $self->_read($self->{buffer}) };
    if (my $e = $@) {
        # the one parse boundary: nothing a notary sends leaves as an exception
        $outcome = Converge::Error->caught($e) ? Converge::Outcome->failure_of($e, undef)
            : Converge::Outcome->new('failure', 'response', undef, 'unreadable answer: ' . (split /\n/, "$e")[0]);
    }
    $self->{outcome} = $outcome;
    return;
}

# This notary's answer as a vote (every check of either format).
sub _read {
    my ($self, $raw) = @_;
    return (Converge::Legacy::outcome_from_http($raw, $self->{wanted}, $self->{nh}->der, $self->{o}{max_bytes}))[0]
        unless $self->{ext};
    my $now = int $self->{ext}{now}->();
    my $resp = Converge::Legacy::parse_http_response($raw, $self->{o}{max_bytes});
    return Converge::Extended::evaluate($resp, Converge::Extended::trusted_keys($self->{ext}{keys}, $now), {
        host => $self->{target}, port => $self->{port}, fingerprint => $self->{asked}, nonce => $self->{nonce}, now => $now,
        max_skew => $self->{ext}{max_skew}, bind_ip => 1, ip => $self->{o}{ip} // '', log => $self->{ext}{log} });
}

# A fresh legacy query for the same host (extended fallback).
sub legacy_twin {
    my ($self) = @_;
    return ref($self)->new(@$self{qw(nh target port wanted o)}, undef, $self->{deadline});
}

1;

__END__

=head1 NAME

Converge::NotaryIO - asking notaries over the network, all at once

=head1 DESCRIPTION

Every host of every chosen notary is asked at once from one Perl thread: a non-blocking
state machine per host (C<Converge::NotaryIO::HostQuery>: connect, the bounce relay's CONNECT,
TLS, the pin checked before anything is sent, the request, the response read until the server
closes) driven by C<select>. Within a notary the first definitive answer wins; C<run> returns
as soon as no pending answer can change the verdict. Each notary's part is a
C<Converge::NotaryResult> (C<name>, C<vote>, C<kind>, C<status>, C<host>, C<detail>,
C<elapsed>, C<protocol>).

=cut
