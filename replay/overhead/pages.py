"""Synthetic web pages: an HTML file plus N objects on K hosts.

The shape (object count, hosts, log-normal sizes) is a model, hand-chosen to the order of
magnitude of the HTTP Archive's 2015 reports on popular pages (about a hundred objects from
a dozen hosts, a few hundred KB to 2 MB); it is not fitted to the thesis's sites, which it
did not describe beyond their download times.
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


QUICK = PageShape(objects=24, hosts=2, html_bytes=30_000, median_bytes=5_000, sigma=1.1,
                  cap_bytes=150_000)
FULL = PageShape(objects=90, hosts=5, html_bytes=60_000, median_bytes=6_000, sigma=1.3,
                 cap_bytes=400_000)


@dataclass(frozen=True, slots=True)
class Page:
    host: str
    html_bytes: int
    objects: tuple[tuple[str, str], ...]  # (host, path)

    @property
    def hosts(self) -> list[str]:
        return sorted({self.host, *(h for h, _ in self.objects)})

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
    rng = random.Random(seed)
    hosts = ["www.page.test"] + [f"static{i}.page.test" for i in range(1, shape.hosts + 1)]
    objs = []
    for i in range(shape.objects):
        size = min(shape.cap_bytes, max(100, int(rng.lognormvariate(0, shape.sigma)
                                                 * shape.median_bytes)))
        objs.append((hosts[i % len(hosts)], f"/obj/{i}-{size}.bin"))
    return Page(hosts[0], shape.html_bytes, tuple(objs))


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
                tuple((str(h), str(p)) for h, p in d["objects"]))
