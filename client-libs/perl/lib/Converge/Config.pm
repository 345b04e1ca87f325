package Converge::Config;
use strict;
use warnings;
use Cwd ();
use Time::HiRes ();
use Converge::Error;
use Converge::Bundle;
use Converge::Policy;
use Converge::JSON qw(parse_json is_object is_bool json_int json_number json_string);

our $VERSION = '0.1.0';

# The configuration directory shared by every converge client. Discovery: an explicit directory
# (must exist); $CONVERGE_CONFIG_DIR (must exist when set); ~/.config/converge
# ($XDG_CONFIG_HOME/converge), if it exists; /usr/local/etc/converge, if it exists. Layout:
# converge.config (JSON, every key optional), notaries-available/*.notary and notaries-enabled/
# symlinks; the 2014 layout (notaries-dir naming the enabled folder) too.

use constant CONFIG_FILE            => 'converge.config';
use constant ENV_VAR                => 'CONVERGE_CONFIG_DIR';
use constant SYSTEM_DIR             => '/usr/local/etc/converge';
use constant DEFAULT_CACHE_LIFETIME => 604800;
use constant DEFAULT_MAX_SKEW       => 300;
use constant MAX_RESPONSE_BYTES     => 262144;
use constant MAX_CONFIG_BYTES       => 65536;
use constant MAX_NOTARY_FILES       => 64;
my @KNOWN = qw(db userdb notaries-dir notary-agreement quorum connect-timeout notary-timeout total-timeout
    cache-lifetime stand-aside early-return bounce bounce-port max-response-bytes extended extended-nonce max-skew);
my %KNOWN = map { $_ => 1 } @KNOWN;

sub _bad { Converge::Error->throw('config', $_[0]) }

# Finds the configuration directory ($explicit may be undef; $env defaults to %ENV).
sub discover {
    my ($class, $explicit, $env) = @_;
    $env //= \%ENV;
    if (defined $explicit && $explicit ne '') {
        _bad("configuration directory $explicit does not exist") unless -d $explicit;
        return $explicit;
    }
    my $d = $env->{+ENV_VAR};
    if (defined $d && $d ne '') {
        _bad('$' . ENV_VAR . "=$d is not a directory") unless -d $d;
        return $d;
    }
    my $xdg = $env->{XDG_CONFIG_HOME};
    my $user = defined $xdg && $xdg ne '' ? "$xdg/converge" : (($env->{HOME} // '') . '/.config/converge');
    for my $x ($user, SYSTEM_DIR) { return $x if -d $x }
    _bad('no configuration: set $' . ENV_VAR . ", or create $user or " . SYSTEM_DIR);
}

sub _number {
    my ($raw, $key, $default, $low, $high) = @_;
    return $default unless exists $raw->{$key};
    my $v = json_number($raw->{$key});
    _bad("$key must be a number in [$low, $high]") if !defined $v || $v != $v || $v < $low || $v > $high;
    return $v;
}

sub _int {
    my ($raw, $key, $default, $low, $high, $what) = @_;
    return $default unless exists $raw->{$key};
    my $v = json_int($raw->{$key});
    _bad("$key must be $what") if !defined $v || $v < $low || $v > $high;
    return $v;
}

sub _bool {
    my ($raw, $key, $default) = @_;
    return $default unless exists $raw->{$key};
    my $v = $raw->{$key};
    _bad("$key must be true or false") unless is_bool($v);
    return $v ? 1 : 0;
}

sub _path {
    my ($dir, $raw, $key, $default) = @_;
    return defined $default ? "$dir/$default" : undef unless exists $raw->{$key};
    my $v = $raw->{$key};
    return undef unless defined $v;
    _bad("$key must be a path") if !defined json_string($v) || $v eq '';
    $v = ($ENV{HOME} // '') . substr($v, 1) if $v eq '~' || $v =~ m{\A~/};
    return $v =~ m{\A/} ? $v : "$dir/$v";
}

# Validates the decoded converge.config (a hash) of $dir.
sub from_raw {
    my ($class, $dir, $raw) = @_;
    my @unknown = sort grep { !$KNOWN{$_} } keys %$raw;
    _bad('unknown configuration keys: ' . join(', ', @unknown)) if @unknown;
    my %c = (directory => $dir);
    $c{bounce_port} = _int($raw, 'bounce-port', 4242, 1, 65535, 'an integer port 1..65535');
    $c{cache_lifetime} = exists $raw->{'cache-lifetime'} && !defined $raw->{'cache-lifetime'} ? undef
        : _number($raw, 'cache-lifetime', DEFAULT_CACHE_LIFETIME, 0, 10 * 365 * 86400);
    $c{quorum} = _int($raw, 'quorum', 3, 1, 16, 'an integer 1..16');
    $c{max_response_bytes} = _int($raw, 'max-response-bytes', MAX_RESPONSE_BYTES, 1024, 16 * 1024 * 1024, 'an integer 1024..16777216');
    $c{extended} = 'prefer';
    if (exists $raw->{'extended'}) {
        my $e = $raw->{'extended'};
        _bad('extended must be one of off, prefer, fallback, require')
            unless defined json_string($e) && $e =~ /\A(?:off|prefer|fallback|require)\z/;
        $c{extended} = $e;
    }
    $c{max_skew} = _int($raw, 'max-skew', DEFAULT_MAX_SKEW, 0, 86400, 'an integer 0..86400 (seconds)');
    $c{extended_nonce} = _bool($raw, 'extended-nonce', 1);
    $c{agreement} = 'majority';
    if (exists $raw->{'notary-agreement'}) {
        my $a = $raw->{'notary-agreement'};
        _bad('notary-agreement must be a string') if !defined $a || ref $a;
        $c{agreement} = Converge::Policy::parse($a);
    }
    $c{db} = _path($dir, $raw, 'db', 'cache.sqlite3');
    $c{userdb} = _path($dir, $raw, 'userdb', undef);
    $c{notaries_dir} = _path($dir, $raw, 'notaries-dir', '.');
    $c{connect_timeout} = _number($raw, 'connect-timeout', 3.0, 0.01, 600);
    $c{notary_timeout} = _number($raw, 'notary-timeout', 5.0, 0.01, 600);
    $c{total_timeout} = _number($raw, 'total-timeout', 10.0, 0.01, 3600);
    $c{stand_aside} = _bool($raw, 'stand-aside', 1);
    $c{early_return} = _bool($raw, 'early-return', 1);
    $c{bounce} = _bool($raw, 'bounce', 0);
    return bless \%c, $class;
}

# Discovers ($explicit may be undef) and loads a configuration directory.
sub load {
    my ($class, $explicit, $env) = @_;
    my $dir = $class->discover($explicit, $env);
    my $f = "$dir/" . CONFIG_FILE;
    my $raw = {};
    if (-e $f) {
        _bad("$f larger than " . MAX_CONFIG_BYTES . ' bytes') if -s $f > MAX_CONFIG_BYTES;
        open(my $fh, '<:raw', $f) or _bad("cannot read $f: $!");
        my $text = do { local $/; <$fh> };
        close $fh;
        my ($v, $ok) = parse_json($text);
        _bad("$f must hold a JSON object") unless $ok && is_object($v);
        $raw = $v;
    }
    return $class->from_raw($dir, $raw);
}

for my $f (qw(directory db userdb notaries_dir agreement quorum connect_timeout notary_timeout total_timeout
    cache_lifetime stand_aside early_return max_response_bytes bounce bounce_port extended extended_nonce max_skew)) {
    no strict 'refs';
    *{$f} = sub { $_[0]{$f} };
}

sub _subfolders { my ($d) = @_; -d "$d/notaries-available" || -d "$d/notaries-enabled" }

sub _notary_files {
    my ($dir) = @_;
    opendir(my $dh, $dir) or return ();
    my @out = sort map { "$dir/$_" } grep { /\.notary\z/ } readdir $dh;
    closedir $dh;
    return @out;
}

# Whether $dir is the 2014 libraries' layout: .notary files and neither subfolder.
sub is_flat { my ($d) = @_; !_subfolders($d) && _notary_files($d) ? 1 : 0 }

# Where list_notaries looks, for "no notaries enabled" messages.
sub where_read {
    my ($dir) = @_;
    return 'no notaries-dir' unless defined $dir;
    my $standard = "$dir/notaries-enabled/";
    return _subfolders($dir) ? $standard : "$standard and $dir/*.notary";
}

# Every bundle in $dir, sorted by file name: a list of { bundle, enabled, path }.
sub list_notaries {
    my ($dir) = @_;
    my (%targets, @extra);
    my $flat = is_flat($dir);
    if ($flat) {
        @extra = grep { -e $_ } _notary_files($dir);
    } elsif (-d "$dir/notaries-enabled") {
        for my $p (_notary_files("$dir/notaries-enabled")) {
            if (-l $p) {
                my $r = Cwd::realpath($p);
                $targets{$r} = 1 if defined $r && -e $r;
            } elsif (-e $p) {
                push @extra, $p;
            }
        }
    }
    my @files = !$flat && -d "$dir/notaries-available" ? _notary_files("$dir/notaries-available") : ();
    _bad('more than ' . MAX_NOTARY_FILES . ' notary bundles') if @files + @extra > MAX_NOTARY_FILES;
    my %is_extra = map { $_ => 1 } @extra;
    my @out;
    for my $p (@files, @extra) {
        open(my $fh, '<:raw', $p) or _bad("cannot read $p");
        my $data = do { local $/; <$fh> };
        close $fh;
        my $b = eval { Converge::Bundle->parse($data) };
        if (my $e = $@) {
            Converge::Error->throw('bundle', "$p: " . $e->detail) if Converge::Error->caught($e);
            die $e;
        }
        my $r = Cwd::realpath($p);
        push @out, { bundle => $b, enabled => ($is_extra{$p} || (defined $r && $targets{$r})) ? 1 : 0, path => $p };
    }
    return @out;
}

# What list_notaries read from $dir depends on: the folders and every .notary file in them
# (names, sizes, modification times, link targets).
sub _signature {
    my ($dir) = @_;
    my @paths = ($dir, "$dir/notaries-enabled", "$dir/notaries-available");
    push @paths, map { _notary_files($_) } @paths;
    return join "\0", map { my @st = Time::HiRes::stat($_); join ':', $_, @st ? @st[1, 7, 9] : '-' } @paths;
}

# The enabled logical notaries, de-duplicated by name (the first file wins). The bundles are
# parsed again only when a file or folder changed.
sub notaries {
    my ($self) = @_;
    my @found;
    if ($self->{bundles}) {
        @found = @{ $self->{bundles} };
    } elsif (defined(my $dir = $self->{notaries_dir})) {
        my $sig = _signature($dir);
        unless (defined $self->{_read} && $self->{_read}[0] eq $sig) {
            $self->{_read} = [ $sig, [ map { $_->{bundle} } grep { $_->{enabled} } list_notaries($dir) ] ];
        }
        @found = @{ $self->{_read}[1] };
    }
    my %seen;
    return grep { !$seen{ $_->name }++ } @found;
}

1;

__END__

=head1 NAME

Converge::Config - the configuration directory shared by every converge client

=head1 SYNOPSIS

    my $cfg = Converge::Config->load('/etc/converge');   # undef: discovered
    print $cfg->agreement, ' ', $cfg->quorum, "\n";
    my @bundles = $cfg->notaries;                          # the enabled ones

=head1 DESCRIPTION

Discovery: an explicit directory; C<$CONVERGE_CONFIG_DIR>; C<$XDG_CONFIG_HOME/converge> or
C<~/.config/converge>; C</usr/local/etc/converge>. C<converge.config> is JSON with the keys
C<db>, C<userdb>, C<notaries-dir>, C<notary-agreement>, C<quorum>, C<connect-timeout>,
C<notary-timeout>, C<total-timeout>, C<cache-lifetime>, C<stand-aside>, C<early-return>,
C<bounce>, C<bounce-port>, C<max-response-bytes>, C<extended>, C<extended-nonce>,
C<max-skew>; an unknown key or a wrong type dies with a L<Converge::Error> of kind C<config>.
Bundles live in C<notaries-available/> and are enabled by symlinks in C<notaries-enabled/>;
the 2014 layout (C<notaries-dir> naming a folder of C<.notary> files) is read too.

=cut
