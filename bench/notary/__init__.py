"""The notary benchmark: cached and uncached validation rates against same-run baselines.

Building blocks (each usable on its own, and exercised by ``tests/bench``):

* :mod:`bench.notary.procs`: start, wait for and stop the processes of one run.
* :mod:`bench.notary.certs`: an RSA-2048 self-signed certificate for the local TLS target.
* :mod:`bench.notary.trivial`: the baseline, a trivial aiohttp+uvloop app.
* :mod:`bench.notary.wrk`: the load generator (``wrk`` with a generated Lua script).
* :mod:`bench.notary.stime`: ``openssl s_server`` as the target, ``openssl s_time`` as its
  raw handshake rate.
* :mod:`bench.notary.report`: medians, ratios, the JSON results and the Markdown table.
* :mod:`bench.notary.run`: one full run (``python -m bench.notary.run``).
"""
