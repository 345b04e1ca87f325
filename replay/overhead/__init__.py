"""The 2015 thesis's HTTPS overhead, reproduced over emulated network paths: synthetic pages
(:mod:`.pages`) served over http and https by aiohttp (:mod:`.server`), downloaded as a
browser does (:mod:`.client`) through toxiproxy path profiles (:mod:`.toxi`,
:mod:`.profiles`); :mod:`.experiment` runs it, :mod:`.report` writes it beside the thesis."""
