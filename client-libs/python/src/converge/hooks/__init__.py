"""The TLS hooks of :mod:`converge.tls`, one module per integration: :mod:`.context` (the
``ssl`` mechanism every other uses), :mod:`.certificate`, :mod:`.urllib` (``http.client``,
``urllib.request``), :mod:`.urllib3`, :mod:`.requests`, :mod:`.httpx`, :mod:`.aiohttp`,
:mod:`.asyncio`. Import the public names from :mod:`converge.tls`."""
