package Converge::Extended;
use strict;
use warnings;
use Crypt::PK::Ed25519 ();
use Crypt::PRNG ();
use JSON::XS ();
use Converge::Error;
use Converge::Bundle;
use Converge::Legacy;
use Converge::Fingerprint;
use Converge::Transparency;
use Converge::JSON qw(verified_object is_object json_int json_string);

our $VERSION = '0.1.0';

# The extended answer format converge-answer/1, client side: verification of a signed answer in
# the documented order, each failure named; the request; the reduction to a vote.

use constant DEFAULT_MAX_SKEW => 300;
use constant MEDIA_TYPE       => 'application/vnd.converge.answer+json';
use constant PATH             => '/v2/answer';
use constant MAX_ANSWER_BYTES => 65536;
use constant MEMBER           => ',"transparency":';
# The signed-answer frame: fixed ASCII prefix, key id K, signature V, statement bytes T, final }.
my $FRAME = qr/\A\{"signature":\{"alg":"ed25519","key_id":"([\x20\x21\x23-\x5b\x5d-\x7e]+)","value":"([\x20\x21\x23-\x5b\x5d-\x7e]+)"\},"statement":(.*)\}\z/s;
my %VERDICT_STATUS = (match => 200, mismatch => 409, unreachable => 503, refused => 403);
my %VOTES = (match => [qw(success match)], mismatch => [qw(failure mismatch)],
    unreachable => [qw(unreachable target-unreachable)], refused => [qw(unreachable refused)]);

# The bundle's signing keys trusted at $now: { key_id => raw public key }.
sub trusted_keys {
    my ($keys, $now) = @_;
    return { map { $_->key_id => $_->public_key } grep { $_->trusted_at($now) } @$keys };
}

# The host as a notary names it in target.host.
sub expected_host {
    my ($host) = @_;
    (my $bare = $host) =~ s/\A\[|\]\z//g;
    my $ip = eval { Converge::Legacy::check_ip($bare) };
    return $ip if defined $ip;
    my $name = lc $host;
    $name =~ s/\.\z//;
    return $name;
}

sub _reject { die Converge::Extended::Rejected->new($_[0], $_[1]) }


# Checks an extended answer body in the documented order. %$exp: host, port, fingerprint
# (Converge::Fingerprint), nonce, now, max_skew, bind_ip, ip (each optional). Returns { verdict,
# detail, key_id, answered_at }; dies with a Converge::Extended::Rejected (reason, message).
sub verify_answer {
    my ($raw, $keys, $exp) = @_;
    _reject('malformed', 'answer is not the signed-answer frame') unless length $raw <= MAX_ANSWER_BYTES && $raw =~ $FRAME;
    my ($kid, $value, $statement) = ($1, $2, $3);
    # T ends at the first ,"transparency": (the log's member runs from there to the final })
    my $cut = index $statement, MEMBER;
    my $member = $cut < 0 ? undef : substr $statement, $cut + length MEMBER;
    $statement = substr $statement, 0, $cut if $cut >= 0;
    my $pub = $keys->{$kid};
    _reject('unknown-key', "signing key $kid is not trusted") unless defined $pub;
    my $signature = Converge::Bundle::unb64url($value);
    my $good = defined $signature && length $signature == 64 && length $pub == 32 && eval {
        Crypt::PK::Ed25519->new->import_key_raw($pub, 'public')->verify_message($signature, $statement);
    };
    _reject('bad-signature', 'signature does not verify') unless $good;
    my $stmt = verified_object($statement);
    _reject('malformed', 'statement is not a JSON object within the bounds') unless $stmt;
    _reject('malformed', 'not a ' . Converge::Bundle::EXTENDED_FORMAT . " statement by key $kid")
        unless (json_string($stmt->{type}) // '') eq Converge::Bundle::EXTENDED_FORMAT && (json_string($stmt->{key_id}) // '') eq $kid;
    my $verdict = json_string($stmt->{verdict});
    my $target = $stmt->{target};
    _reject('malformed', 'statement lacks a verdict or target') unless defined $verdict && exists $VERDICT_STATUS{$verdict} && is_object($target);
    my $at = json_int($stmt->{answered_at});
    _reject('malformed', 'answered_at must be an integer') unless defined $at;
    if (defined $exp->{host} && $exp->{host} ne '') {
        my $th = json_string($target->{host});
        my $tp = json_int($target->{port});
        _reject('wrong-target', "answer is about another target, not $exp->{host}:" . ($exp->{port} // ''))
            unless defined $th && defined $tp && $th eq expected_host($exp->{host}) && $tp == ($exp->{port} // -1);
    }
    if ($exp->{bind_ip}) {
        my $tip = $target->{ip};
        if (!defined $exp->{ip} || $exp->{ip} eq '') {
            _reject('wrong-target', 'answer is about a probe of an address the client did not name') if defined $tip;
        } elsif (!defined json_string($tip) || $tip ne expected_host($exp->{ip})) {
            _reject('wrong-target', "answer is about a probe of another address, not $exp->{ip}");
        }
    }
    my $req = $stmt->{request};
    $req = undef unless is_object($req);
    if (my $fp = $exp->{fingerprint}) {
        _reject('wrong-target', 'answer is about another certificate fingerprint')
            unless $req && (json_string($req->{alg}) // '') eq $fp->algorithm && (json_string($req->{fingerprint}) // '') eq $fp->colon_hex;
    }
    if (defined $exp->{nonce} && $exp->{nonce} ne '') {
        _reject('nonce-mismatch', 'answer does not echo our nonce') unless $req && (json_string($req->{nonce}) // "\0") eq $exp->{nonce};
    }
    if (defined $exp->{now}) {
        my $skew = $exp->{max_skew} // DEFAULT_MAX_SKEW;
        _reject('stale', 'answer time is ' . ($exp->{now} - $at) . " s from now (max skew $skew s)") if abs($exp->{now} - $at) > $skew;
    }
    return { verdict => $verdict, detail => json_string($stmt->{detail}) // '', key_id => $kid, answered_at => $at,
        target => $target, request => $req, member => $member };
}

# Unpadded base64url of 16 random bytes.
sub new_nonce { Converge::Bundle::b64url(Crypt::PRNG::random_bytes(16)) }

my $JS = JSON::XS->new->allow_nonref->ascii;

# The JSON body of an extended request.
sub request_body {
    my ($host, $port, $fp, $nonce, $ip, $transparency) = @_;
    Converge::Legacy::check_target($host, $port);
    my $body = '{"host":' . $JS->encode("$host") . ',"port":' . (0 + $port) . ',"fingerprint":"' . $fp->colon_hex
        . '","alg":"' . $fp->algorithm . '"';
    $body .= ',"ip":"' . Converge::Legacy::check_ip($ip) . '"' if defined $ip && $ip ne '';
    $body .= ',"nonce":"' . $nonce . '"' if defined $nonce && $nonce ne '';
    $body .= ',"transparency":true' if $transparency;
    return $body . '}';
}

# The whole HTTP/1.0 request of the extended format.
sub request_bytes {
    my $body = request_body(@_);
    return 'POST ' . PATH . " HTTP/1.0\r\nContent-Type: application/json\r\nAccept: " . MEDIA_TYPE
        . "\r\nConnection: close\r\nContent-Length: " . length($body) . "\r\n\r\n" . $body;
}

# The fingerprint form to ask about: SHA-256 when known, else the first.
sub request_fingerprint {
    my ($forms) = @_;
    my ($f) = grep { $_->algorithm eq 'sha256' } @$forms;
    return $f // $forms->[0];
}

# Statuses meaning "this notary does not speak the extended format here".
sub not_offered { my $s = $_[0]; defined $s && ($s == 400 || $s == 404 || $s == 405 || $s == 501) }

# Reduces one extended response ({ status, headers, body }) to a vote.
sub evaluate {
    my ($resp, $keys, $exp) = @_;
    my ($ctype) = split /;/, ($resp->{headers}{'content-type'} // ''), 2;
    $ctype = lc($ctype // '');
    $ctype =~ s/\A\s+|\s+\z//g;
    my $st = $resp->{status};
    return Converge::Outcome->new('unreachable', 'status', $st, "HTTP status $st")
        unless (grep { $_ == $st } values %VERDICT_STATUS) && $ctype eq MEDIA_TYPE;
    my $v = eval { verify_answer($resp->{body}, $keys, $exp) };
    if (my $e = $@) {
        die $e unless ref $e eq 'Converge::Extended::Rejected';
        return Converge::Outcome->new('failure', $e->reason, $st, $e->message);
    }
    return Converge::Outcome->new('failure', 'response', $st, "status $st with signed verdict $v->{verdict}")
        if $VERDICT_STATUS{ $v->{verdict} } != $st;
    # a bundle that names a log: a match needs a valid proof of inclusion (docs/transparency.md)
    if ($exp->{log} && $v->{verdict} eq 'match') {
        my $fp = $exp->{fingerprint} // eval { Converge::Fingerprint->parse(json_string(($v->{request} // {})->{fingerprint})) };
        my $ok = eval {
            _reject('log-entry', 'the statement names no fingerprint') unless $fp;
            Converge::Transparency::check_member($v->{member}, $exp->{log}, $v->{target}, $fp);
            1;
        };
        if (!$ok) {
            my $e = $@;
            die $e unless ref $e eq 'Converge::Extended::Rejected';
            return Converge::Outcome->new('failure', $e->reason, $st, $e->message);
        }
    }
    my ($vote, $kind) = @{ $VOTES{ $v->{verdict} } };
    return Converge::Outcome->new($vote, $kind, $st, $v->{detail}, $resp->{body});
}

package Converge::Extended::Rejected;
use strict;
use warnings;
use overload '""' => sub { "answer rejected ($_[0]{reason}): $_[0]{message}" }, fallback => 1;

# A signed answer that failed verification: reason (malformed, unknown-key,
# bad-signature, wrong-target, nonce-mismatch, stale) and message.
sub new     { my ($c, $reason, $message) = @_; bless { reason => $reason, message => $message }, $c }
sub reason  { $_[0]{reason} }
sub message { $_[0]{message} }

1;

__END__

=head1 NAME

Converge::Extended - the converge-answer/1 format, client side

=head1 DESCRIPTION

C<verify_answer($raw, \%keys, \%expect)> checks a signed answer in the documented order
(malformed, unknown-key, bad-signature, wrong-target, nonce-mismatch, stale)
and dies with a C<Converge::Extended::Rejected> (C<reason>, C<message>) on the first failure;
C<request_bytes> builds the request with a fresh nonce (C<new_nonce>); C<evaluate> reduces a
response to a vote.

=cut
