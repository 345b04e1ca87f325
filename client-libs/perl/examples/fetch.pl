#!/usr/bin/perl
# Fetch a page only if the notaries see the certificate this machine sees.
#   perl examples/fetch.pl https://www.example.org/ [CONFIG_DIR]
use strict; use warnings;
use Converge::UserAgent;
my ($url, $dir) = @ARGV;
my $ua = Converge::UserAgent->new(converge => Converge::Client->load($dir));   # was: LWP::UserAgent->new
my $r = $ua->get($url);                                  # the notaries decide inside the TLS handshake
if (my $nt = Converge::UserAgent::not_trusted($r)) { print STDERR $nt->message, "\n"; exit 1 }
die $r->status_line, "\n" unless $r->is_success;
print $r->decoded_content;
