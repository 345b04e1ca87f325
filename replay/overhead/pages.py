"""Synthetic web pages: an HTML file plus N objects on K hosts.

The shape (object count, hosts, log-normal sizes) is a model, hand-chosen to the order of
magnitude of the HTTP Archive's 2015 reports on popular pages (about a hundred objects from
a dozen hosts, a few hundred KB to 2 MB); it is not fitted to the thesis's sites, which it
did not describe beyond their download times.

Redirects: the thesis's popular sites answered the first request with a redirect (to
``www.``, or http to https) before the page. A page has ``redirects`` hops before its HTML,
each on a host of its own (``page.test`` -> ``www.page.test``, a new connection, in the
scheme of the load: http and https alike); the thesis-shaped pages have one (a model: the
thesis names redirects but does not count them).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from html.parser import HTMLParser
from pathlib import Path

from replay.errors import ReplayInputError


@dataclass(frozen=True, slots=True)
class PageShape:
    objects: int
    hosts: int  # hosts of the objects, besides the page's own host
    html_bytes: int
    median_bytes: int  # log-normal object sizes: median and sigma, capped
    sigma: float
    cap_bytes: int
    redirects: int = 1  # hops before the HTML, each to another host (page.test -> www.)


QUICK = PageShape(objects=24, hosts=2, html_bytes=30_000, median_bytes=5_000, sigma=1.1,
                  cap_bytes=150_000)
FULL = PageShape(objects=90, hosts=5, html_bytes=60_000, median_bytes=6_000, sigma=1.3,
                 cap_bytes=400_000)
MAX_REDIRECTS = 5  # a load follows at most this many (and a page has at most this many)


@dataclass(frozen=True, slots=True)
class Page:
    host: str
    html_bytes: int
    objects: tuple[tuple[str, str], ...]  # (host, path)
    redirects: tuple[str, ...] = ()  # the load starts at redirects[0]; each hop -> the next

    @property
    def hosts(self) -> list[str]:
        return sorted({self.host, *self.redirects, *(h for h, _ in self.objects)})

    @property
    def first_host(self) -> str:
        return self.redirects[0] if self.redirects else self.host

    def redirect_target(self, host: str) -> str | None:
        """The host a redirect hop on ``host`` sends the browser to; None: not a hop."""
        if host not in self.redirects:
            return None
        i = self.redirects.index(host)
        return self.redirects[i + 1] if i + 1 < len(self.redirects) else self.host

    def without_redirects(self) -> Page:
        return Page(self.host, self.html_bytes, self.objects)

    def total_bytes(self) -> int:
        return self.html_bytes + sum(object_size(p) for _, p in self.objects)


def object_size(path: str) -> int:
    """``/obj/<i>-<bytes>.bin`` -> bytes."""
    try:
        return int(path.rsplit("-", 1)[1].split(".", 1)[0])
    except (IndexError, ValueError) as exc:
        raise ReplayInputError(f"not an object path: {path!r}") from exc


def make_page(shape: PageShape, seed: int) -> Page:
    if not 1 <= shape.objects <= 1000 or not 0 <= shape.hosts <= 50:
        raise ReplayInputError("a page has 1-1000 objects on 0-50 other hosts")
    if not 0 <= shape.redirects <= MAX_REDIRECTS:
        raise ReplayInputError(f"a page has 0-{MAX_REDIRECTS} redirects")
    rng = random.Random(seed)
    hosts = ["www.page.test"] + [f"static{i}.page.test" for i in range(1, shape.hosts + 1)]
    objs = []
    for i in range(shape.objects):
        size = min(shape.cap_bytes, max(100, int(rng.lognormvariate(0, shape.sigma)
                                                 * shape.median_bytes)))
        objs.append((hosts[i % len(hosts)], f"/obj/{i}-{size}.bin"))
    hops = tuple(["page.test", *(f"r{i}.page.test" for i in range(2, shape.redirects + 1))]
                 [:shape.redirects])
    return Page(hosts[0], shape.html_bytes, tuple(objs), hops)


def html(page: Page) -> bytes:
    """The page's HTML: one ``<img src="//host/path">`` per object, padded to its size."""
    body = "".join(f'<img src="//{h}{p}">\n' for h, p in page.objects)
    head = "<!doctype html><html><head><title>synthetic</title></head><body>\n"
    tail = "</body></html>\n"
    pad = max(0, page.html_bytes - len(head) - len(body) - len(tail) - 9)
    return (head + body + "<!--" + "x" * pad + "-->\n" + tail).encode()


class _Srcs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.srcs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for k, v in attrs:
            if k == "src" and v:
                self.srcs.append(v)


def embedded(doc: bytes) -> list[tuple[str, str]]:
    """(host, path) of every ``src`` in an HTML document, as a browser's parser finds them."""
    p = _Srcs()
    p.feed(doc.decode("utf-8", errors="replace"))
    out = []
    for s in p.srcs:
        if s.startswith("//"):
            host, _, path = s[2:].partition("/")
            out.append((host, "/" + path))
    return out


def save(page: Page, path: Path) -> None:
    path.write_text(json.dumps(asdict(page)) + "\n")


def load(path: Path) -> Page:
    d = json.loads(path.read_text())
    return Page(d["host"], int(d["html_bytes"]),
                tuple((str(h), str(p)) for h, p in d["objects"]),
                tuple(str(h) for h in d.get("redirects", ())))
