package Converge::Cache;
use strict;
use warnings;
use DBI ();
use File::Basename ();
use File::Path ();
use Converge::Error;

our $VERSION = '0.1.0';

# The local cache, in the schema of the 2011 add-on so that one file serves every client:
# fingerprints(id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER) with
# a unique index on (location, fingerprint). WAL and a busy timeout let processes share it.

sub _io { Converge::Error->throw('cache-io', $_[0]) }

# Opens (and, unless $read_only, creates) a cache file.
sub new {
    my ($class, $path, $read_only) = @_;
    my $dbh = eval {
        File::Path::make_path(File::Basename::dirname($path)) unless $read_only || -d File::Basename::dirname($path);
        my $h = DBI->connect("dbi:SQLite:dbname=$path", '', '', {
            RaiseError => 1, PrintError => 0, AutoCommit => 1,
            ($read_only ? (sqlite_open_flags => DBD::SQLite::OPEN_READONLY()) : ()),
        });
        $h->sqlite_busy_timeout(5000);
        unless ($read_only) {
            $h->do('PRAGMA journal_mode = WAL');
            $h->do('PRAGMA synchronous = NORMAL');
            $h->do('CREATE TABLE IF NOT EXISTS fingerprints (id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER)');
            $h->do('CREATE UNIQUE INDEX IF NOT EXISTS location_fingerprint on fingerprints (location, fingerprint)');
        }
        $h;
    };
    _io("cannot open cache $path: " . ($@ =~ s/\s+\z//r)) unless $dbh;
    my $lookup = eval { $dbh->prepare('SELECT timestamp, typeof(timestamp) FROM fingerprints WHERE location = ? AND fingerprint = ?') };
    _io("cannot open cache $path: " . ($@ =~ s/\s+\z//r)) unless $lookup;
    return bless { path => $path, read_only => $read_only ? 1 : 0, dbh => $dbh, lookup => $lookup }, $class;
}

sub path { $_[0]{path} }

# The entry's timestamp, or undef when there is none (or it is not an integer).
sub lookup {
    my ($self, $location, $fingerprint) = @_;
    my $row = eval {
        my $st = $self->{lookup};
        $st->execute($location, $fingerprint);
        my $r = $st->fetchrow_arrayref;
        my @copy = $r ? @$r : ();
        $st->finish;
        \@copy;
    };
    _io('cache lookup failed: ' . ($@ =~ s/\s+\z//r)) unless $row;
    return @$row && $row->[1] eq 'integer' ? 0 + $row->[0] : undef;
}

# Records a trusted fingerprint at $timestamp (unix seconds).
sub store {
    my ($self, $location, $fingerprint, $timestamp) = @_;
    _io('cache opened read-only') if $self->{read_only};
    eval {
        $self->{dbh}->do('INSERT INTO fingerprints (location, fingerprint, timestamp) VALUES (?, ?, ?) '
            . 'ON CONFLICT (location, fingerprint) DO UPDATE SET timestamp = excluded.timestamp',
            undef, $location, $fingerprint, int $timestamp);
        1;
    } or _io('cache write failed: ' . ($@ =~ s/\s+\z//r));
    return;
}

sub close {
    my ($self) = @_;
    $self->{lookup}->finish if $self->{lookup};
    $self->{dbh}->disconnect if $self->{dbh};
    delete @$self{qw(lookup dbh)};
    return;
}

1;

__END__

=head1 NAME

Converge::Cache - the local cache in the 2011 add-on's SQLite schema

=head1 SYNOPSIS

    my $cache = Converge::Cache->new($path);            # or ->new($path, 1): read-only
    $cache->store('www.example.org:443', $fp->colon_hex, time);
    my $ts = $cache->lookup('www.example.org:443', $fp->colon_hex);

=head1 DESCRIPTION

One table C<fingerprints(id, location, fingerprint, timestamp)> with a unique index on
C<(location, fingerprint)>, WAL mode and a busy timeout, so that every client and process
shares one file. IO failures die with a L<Converge::Error> of kind C<cache-io>.

=cut
