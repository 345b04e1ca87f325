package Converge::Legacy;
use strict;
use warnings;
use Socket qw(inet_pton inet_ntop AF_INET AF_INET6);
use Crypt::PK::RSA ();
use JSON::XS ();
use Converge::Error;
use Converge::Bundle;
use Converge::Fingerprint;
use Converge::JSON qw(verified_object is_object json_int json_string);

our $VERSION = '0.1.0';

# The legacy (Convergence v1) protocol, client side (pure): the request bytes, the response
# framing, the signed bytes, RSA/SHA-1 verification, the parse of what was verified and the
# reduction of an answer to a vote (a Converge::Outcome).

use constant MAX_RESPONSE_BYTES  => 262144;
use constant MAX_HEADER_BYTES    => 16384;
use constant MAX_HISTORY_ENTRIES => 1000;
my $PY_SPACE = qr/[ \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0]/;
my $JS = JSON::XS->new->allow_nonref->ascii;

sub _q { my $s = $_[0]; $JS->encode(defined $s ? "$s" : undef) }

# Refuses a host or port that cannot be put into /target/<host>+<port>.
sub check_target {
    my ($host, $port) = @_;
    Converge::Error->throw('target', 'invalid target host ' . _q($host))
        if !defined $host || ref $host || $host !~ $Converge::Bundle::HOST_RE || $host =~ /\A[.-]/;
    Converge::Error->throw('target', 'invalid target port ' . _q($port))
        if !defined $port || ref $port || $port !~ /\A[0-9]{1,5}\z/ || $port < 1 || $port > 65535;
    return;
}

# The cache and record key host:port (host lower-cased).
sub location { lc($_[0]) . ':' . (0 + $_[1]) }

# An IP address literal in its compressed form (IPv6 every group in hex), else a "target" error.
sub check_ip {
    my ($ip) = @_;
    my $bad = sub { Converge::Error->throw('target', 'invalid target address ' . _q($ip)) };
    $bad->() if !defined $ip || ref $ip || index($ip, '%') >= 0;
    if ($ip !~ /:/) {
        $bad->() unless $ip =~ /\A(?:0|[1-9][0-9]{0,2})(?:\.(?:0|[1-9][0-9]{0,2})){3}\z/;
        my $bin = inet_pton(AF_INET, $ip) // $bad->();
        return inet_ntop(AF_INET, $bin);
    }
    my $bin = inet_pton(AF_INET6, $ip) // $bad->();
    my @w = unpack 'n8', $bin;
    my ($best, $len) = (-1, 0);
    for (my $i = 0; $i < 8;) {
        if ($w[$i]) { $i++; next }
        my $j = $i;
        $j++ while $j < 8 && !$w[$j];
        ($best, $len) = ($i, $j - $i) if $j - $i > $len;
        $i = $j;
    }
    my $hex = sub { join ':', map { sprintf '%x', $_ } @_ };
    return $hex->(@w) if $len < 2;
    return $hex->(@w[0 .. $best - 1]) . '::' . $hex->(@w[$best + $len .. 7]);
}

# The exact request the 2011 add-on sends; $ip asks the notary to connect to that address.
sub request_bytes {
    my ($host, $port, $fp, $ip) = @_;
    check_target($host, $port);
    my $suffix = defined $ip && $ip ne '' ? '/' . check_ip($ip) : '';
    my $body = 'fingerprint=' . $fp->colon_hex;
    return 'POST /target/' . lc($host) . '+' . (0 + $port) . $suffix . " HTTP/1.0\r\n"
        . "Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n"
        . 'Content-Length: ' . length($body) . "\r\n\r\n" . $body;
}

# What Python's str.strip() strips from latin-1 text.
sub py_strip { my $s = $_[0]; $s =~ s/\A$PY_SPACE+|$PY_SPACE+\z//g; $s }

sub _latin1_q { my $s = $_[0]; utf8::upgrade($s); _q($s) }

sub _bad { Converge::Error->throw('response', $_[0]) }

# Splits a complete response read until the server closed: { status, headers, body }.
sub parse_http_response {
    my ($raw, $max) = @_;
    $max //= MAX_RESPONSE_BYTES;
    _bad("response larger than $max bytes") if length $raw > $max;
    my ($sep, $seplen) = (index($raw, "\r\n\r\n"), 4);
    ($sep, $seplen) = (index($raw, "\n\n"), 2) if $sep < 0;
    _bad('response has no end of headers') if $sep < 0;
    _bad('response headers too large') if $sep > MAX_HEADER_BYTES;
    (my $head = substr($raw, 0, $sep)) =~ s/\r\n/\n/g;
    my @lines = split /\n/, $head, -1;
    _bad('bad status line ' . _latin1_q(substr($lines[0], 0, 80))) unless $lines[0] =~ m{\AHTTP/1\.[01] ([0-9]{3})(?: .*)?\z}s;
    my $status = 0 + $1;
    my %headers;
    for my $line (@lines[1 .. $#lines]) {
        my $colon = index($line, ':');
        my $name = $colon < 0 ? '' : substr($line, 0, $colon);
        _bad('bad header line ' . _latin1_q(substr($line, 0, 80))) if $colon < 0 || $name eq '' || $name ne py_strip($name);
        my $key = lc $name;
        my $value = py_strip(substr($line, $colon + 1));
        $headers{$key} = exists $headers{$key} ? "$headers{$key}, $value" : $value;
    }
    my $body = substr($raw, $sep + $seplen);
    _bad('chunked transfer coding is not allowed on notary responses')
        if index(lc($headers{'transfer-encoding'} // ''), 'chunked') >= 0;
    if (exists $headers{'content-length'}) {
        my $cl = $headers{'content-length'};
        _bad('bad Content-Length ' . _latin1_q(substr($cl, 0, 20))) unless $cl =~ /\A[0-9]{1,12}\z/;
        _bad('truncated response body') if $cl > length $body;
        $body = substr($body, 0, $cl);
    }
    return { status => $status, headers => \%headers, body => $body };
}

sub _timestamp {
    my ($v, $what) = @_;
    return 0 + $v if defined $v && !ref $v && $v =~ /\A[0-9]{1,12}\z/;
    my $n = json_int($v);
    return $n if defined $n && $n >= 0 && $n < 1_000_000_000_000;
    _bad("$what is not a decimal unix time");
}

use constant SIGNATURE_MEMBER => ', "signature": "';

# Splits a 200/409 body into the signed bytes S and the signature (base64 text): the body must
# be S without its final }, then `, "signature": "<base64>"}` and nothing after it.
sub split_signed_body {
    my ($body, $max) = @_;
    $max //= MAX_RESPONSE_BYTES;
    _bad("body larger than $max bytes") if length $body > $max;
    my $i = rindex($body, SIGNATURE_MEMBER);
    _bad('body does not end with the signature member')
        unless $i >= 0 && substr($body, $i + length SIGNATURE_MEMBER) =~ m{\A([A-Za-z0-9+/]+={0,2})"\}\z};
    return (substr($body, 0, $i) . '}', $1);
}

my %KEYS;    # certificate DER => Crypt::PK::RSA (a notary's key, parsed once)

# Checks the RSASSA-PKCS1-v1_5 SHA-1 signature (base64 text) over the signed bytes.
sub verify_signed {
    my ($signed, $signature, $der) = @_;
    my $key = $KEYS{$der} //= eval { Crypt::PK::RSA->new(\$der) };
    Converge::Error->throw('signature', 'the notary certificate does not hold an RSA key') unless $key;
    my $raw = Converge::Bundle::strict_base64($signature);
    return if defined $raw && eval { $key->verify_message($raw, $signed, 'SHA1', 'v1.5') };
    Converge::Error->throw('signature', "signature does not verify against the notary's certificate");
}

# The history in verified signed bytes ([fp, start, finish]...): the bounds scan, the stock
# parser, the shape.
sub parse_signed_list {
    my ($signed) = @_;
    my $obj = verified_object($signed);
    _bad('signed bytes are not a JSON object within the bounds') unless $obj;
    my $fl = $obj->{fingerprintList};
    _bad('fingerprintList missing or not a list') unless ref $fl eq 'ARRAY';
    _bad('more than ' . MAX_HISTORY_ENTRIES . ' history entries') if @$fl > MAX_HISTORY_ENTRIES;
    my @entries;
    for my $item (@$fl) {
        my $ts = is_object($item) ? $item->{timestamp} : undef;
        _bad('history entry is not an object with a timestamp object') unless is_object($ts);
        my $fp_text = $item->{fingerprint};
        _bad('history entry has no fingerprint') unless defined json_string($fp_text);
        my $fp = eval { Converge::Fingerprint->parse($fp_text) };
        _bad('history entry fingerprint: ' . $@->detail) unless $fp;
        push @entries, [$fp, _timestamp($ts->{start}, 'start'), _timestamp($ts->{finish}, 'finish')];
    }
    return \@entries;
}

# Reads a 200/409 body: framing, signature, bounds, parse and shape, in that order. Returns
# the entries.
sub read_signed_body {
    my ($body, $der, $max) = @_;
    my ($signed, $signature) = split_signed_body($body, $max);
    verify_signed($signed, $signature, $der);
    return parse_signed_list($signed);
}

# Reduces one response (status and body) to a vote; $wanted: the asked certificate's forms.
sub evaluate {
    my ($status, $body, $wanted, $der, $max) = @_;
    if ($status == 200 || $status == 409) {
        my $entries = eval { read_signed_body($body, $der, $max) };
        if (my $e = $@) {
            die $e unless Converge::Error->caught($e);
            return Converge::Outcome->failure_of($e, $status);
        }
        return Converge::Outcome->new('failure', 'mismatch', $status, 'notary sees another certificate') if $status == 409;
        for my $fp (@$wanted) {
            for my $e (@$entries) {
                return Converge::Outcome->new('success', 'listed', $status, '') if $e->[0]->equals($fp);
            }
        }
        my %algs = map { $_->[0]->algorithm => 1 } @$entries;
        my $any = grep { $algs{ $_->algorithm } } @$wanted;
        return Converge::Outcome->new('success', 'status-only', $status, 'list holds no fingerprint of the asked kind')
            if !$any && @$entries;
        return Converge::Outcome->new('failure', 'not-listed', $status, '200 without the fingerprint in the signed list');
    }
    return Converge::Outcome->new('unreachable', 'inconclusive', $status, 'notary could not decide') if $status == 303;
    return Converge::Outcome->new('unreachable', 'status', $status, "HTTP status $status");
}

# Reduces a whole response to (outcome, response or undef).
sub outcome_from_http {
    my ($raw, $wanted, $der, $max) = @_;
    my $r = eval { parse_http_response($raw, $max) };
    if (my $e = $@) {
        die $e unless Converge::Error->caught($e);
        return (Converge::Outcome->failure_of($e, undef), undef);
    }
    return (evaluate($r->{status}, $r->{body}, $wanted, $der, MAX_RESPONSE_BYTES), $r);
}

package Converge::Outcome;
use strict;
use warnings;

# One notary's answer reduced to a vote; kind says why (listed, status-only, mismatch,
# not-listed, response, signature, inconclusive, status, the extended kinds, or an IO kind).
sub new {
    my ($c, $vote, $kind, $status, $detail, $answer) = @_;
    return bless { vote => $vote, kind => $kind, status => $status, detail => $detail, answer => $answer }, $c;
}
sub failure_of { my ($c, $e, $status) = @_; $c->new('failure', $e->kind, $status, $e->detail) }
sub vote   { $_[0]{vote} }
sub kind   { $_[0]{kind} }
sub status { $_[0]{status} }
sub detail { $_[0]{detail} }
sub answer { $_[0]{answer} }

1;

__END__

=head1 NAME

Converge::Legacy - the Convergence v1 protocol, client side

=head1 DESCRIPTION

Pure functions: C<request_bytes($host, $port, $fp, $ip)> (the exact 2011 request),
C<parse_http_response($raw, $max)> (strict framing), C<split_signed_body($body)> (the
signed bytes S and the signature: the body must be S without its C<}>, then the signature
member and nothing else), C<verify_signed($s, $sig, $der)> (RSA/SHA-1 over S),
C<parse_signed_list($s)> (bounds scan, JSON::XS, shape), C<read_signed_body> (all three),
C<evaluate> and
C<outcome_from_http> (a response reduced to a L<Converge::Outcome>: C<vote>, C<kind>,
C<status>, C<detail>).

=cut
