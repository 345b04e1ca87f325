"""``requests`` checked by converge: a transport adapter over :mod:`converge.hooks.urllib3`'s
pools that announces each request URL's origin (direct, ``proxies=`` or ``HTTPS_PROXY``).
requests is imported only when one of these is called."""

from __future__ import annotations

from typing import Any

from ..client import Client, ConfigArg
from .context import converge_ssl_context, origin, url_origin
from .urllib3 import converge_pools


def requests_adapter(config: ConfigArg | Client = None, **kw: Any) -> Any:
    """A ``requests`` transport adapter checked by converge; mount it on ``https://``. Direct
    connections and HTTP proxies (``proxies=``, ``HTTPS_PROXY``) alike: the origin's
    certificate is checked for the request URL's host:port."""
    import requests.adapters

    ctx = converge_ssl_context(config)

    class ConvergeAdapter(requests.adapters.HTTPAdapter):
        def init_poolmanager(
            self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
        ) -> None:
            pool_kwargs["ssl_context"] = ctx
            super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
            converge_pools(self.poolmanager)

        def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
            if proxy not in self.proxy_manager:
                if not proxy.lower().startswith(("http://", "https://")):
                    raise requests.exceptions.InvalidProxyURL(
                        f"converge checks HTTPS through HTTP(S) proxies only, not {proxy!r}"
                    )
                proxy_kwargs["ssl_context"] = ctx
                converge_pools(super().proxy_manager_for(proxy, **proxy_kwargs))
            return self.proxy_manager[proxy]

        def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
            import urllib3.util

            u = urllib3.util.parse_url(request.url)
            if u.scheme != "https":
                return super().send(request, *args, **kwargs)
            with origin(*url_origin("https", u.host, u.port)):
                return super().send(request, *args, **kwargs)

    return ConvergeAdapter(**kw)


def requests_session(config: ConfigArg | Client = None) -> Any:
    """A ``requests.Session`` whose ``https://`` requests are checked by converge."""
    import requests

    session = requests.Session()
    session.mount("https://", requests_adapter(config))
    return session


__all__ = ["requests_adapter", "requests_session"]
