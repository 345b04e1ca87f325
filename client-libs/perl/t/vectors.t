# Every shared vector file through Converge::Vectors::run_case, compared the way the
# conformance runner compares (each field the case states); no expected failures.
use strict;
use warnings;
use Test::More;
use FindBin ();
use lib "$FindBin::RealBin/../lib";
use JSON::XS ();
use Converge::Vectors;

my $DIR = "$FindBin::RealBin/../../vectors";
my $JS = JSON::XS->new->utf8->canonical->allow_nonref;

sub load { open(my $fh, '<:raw', $_[0]) or die $!; JSON::XS->new->utf8->decode(do { local $/; <$fh> }) }

sub diff {
    my ($c, $out) = @_;
    return grep { exists $c->{$_} && $JS->encode($c->{$_}) ne $JS->encode($out->{$_}) } Converge::Vectors::compared($c);
}

# canonical-json.json tests the notary's encoder: clients never re-serialise.
my @files = sort grep { !m{/canonical-json\.json\z} } glob "$DIR/*.json";
ok(@files >= 9, 'the vector files are there');
for my $f (@files) {
    my $doc = load($f);
    ok((grep { $_ eq $doc->{schema} } @Converge::Vectors::SCHEMAS), "$f: schema known");
    ok(@{ $doc->{tests} }, "$f: has cases");
    my @failures;
    for my $c (@{ $doc->{tests} }) {
        my $out = Converge::Vectors::run_case($doc, $c);
        my @d = diff($c, $out);
        push @failures, "case $c->{id} (" . ($c->{comment} // '') . "): @d: " . $JS->encode($out) if @d;
    }
    is_deeply(\@failures, [], (split m{/}, $f)[-1] . ': every case (' . scalar(@{ $doc->{tests} }) . ')');
}

# the must-fail twin: the comparison catches a wrong output, an unknown schema is an error
my $doc = load("$DIR/fingerprints.json");
my $c = $doc->{tests}[0];
my $out = Converge::Vectors::run_case($doc, $c);
is_deeply([ diff($c, $out) ], [], 'a right output compares equal');
is_deeply([ diff($c, { %$out, canonical => '00' }) ], ['canonical'], 'a wrong output is caught');
ok(!eval { Converge::Vectors::run_case({ schema => 'converge-vectors/unknown/1' }, $c); 1 }, 'an unknown schema dies');
my $tr = load("$DIR/transparency.json");
for my $t (grep { ($_->{type} eq 'tree' || $_->{type} eq 'checkpoint') && exists $_->{root} } @{ $tr->{tests} }) {
    my $o = Converge::Vectors::run_case($tr, $t);
    is_deeply([ diff($t, { %$o, root => 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=' }) ], ['root'], "transparency case $t->{id}: a wrong root is caught");
}

done_testing;
