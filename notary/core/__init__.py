"""The notary's pure core: no sockets, no event loop, no clock reads (time is an argument)."""
