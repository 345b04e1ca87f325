"""The restricted-root-store study (the 2015 thesis, docs/rootstore.md): chains scanned from
sites or read from a notary's store, root popularity and top-k coverage, the comparison of
perspectives with full and top-k CA validation, and the synthetic worlds it is run on.
Reached as ``replay rootstore ...``; it uses the notary (``notary.ca``, ``notary.probe``,
``notary.store``) as a library."""
