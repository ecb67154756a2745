"""Rendering the explorer: Jinja2 templates with autoescaping, the static assets, a render cache.

Rules:

1. Autoescaping is on and undefined names fail: a notice's value reaches a page only as
   escaped text.
2. Every page carries the same strict headers: a Content-Security-Policy allowing
   scripts, styles, images and fetches from this origin only (no inline script or style),
   ``nosniff``, no referrer, no framing.
3. Assets are named in their URL by a digest of their bytes and cached for a year; a
   request for another digest gets the current bytes without the long lifetime.
4. A page is cached for ``CACHE_SECONDS``, only for the host, path, query and tree size
   it was rendered for (the tool page names the host), at most ``CACHE_ENTRIES`` pages
   (least recently used first out).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

import jinja2
from aiohttp import web

CACHE_SECONDS: Final = 5.0
CACHE_ENTRIES: Final = 512
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
ASSET_TYPES: Final = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}


def page_headers() -> dict[str, str]:
    """The headers of every explorer page and error page (rule 2)."""
    return {
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
        "Cache-Control": "no-cache",
    }


@dataclass(frozen=True)
class Asset:
    """A static file and the digest that names its version in URLs (rule 3)."""

    body: bytes
    content_type: str
    digest: str


def load_assets() -> dict[str, Asset]:
    """Every file under ``static/``, read once."""
    out = {}
    for item in resources.files(__package__).joinpath("static").iterdir():
        suffix = "." + item.name.rsplit(".", 1)[-1]
        if suffix in ASSET_TYPES:
            body = item.read_bytes()
            digest = hashlib.sha256(body).hexdigest()[:16]
            out[item.name] = Asset(body, ASSET_TYPES[suffix], digest)
    return out


def _ago(seconds: int | None) -> str:
    """A duration as people say it: 42 s, 5 min, 3 h, 2 d."""
    if seconds is None:
        return "never"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _utc(timestamp: str | None) -> str:
    """``2026-06-01T00:00:00Z`` as ``2026-06-01 00:00:00 UTC``."""
    if not timestamp:
        return ""
    return timestamp.replace("T", " ").removesuffix("Z") + " UTC"


def _pretty_json(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


class Renderer:
    """The template environment, bound to a mount prefix and the asset digests (rule 1)."""

    def __init__(self, prefix: str, assets: Mapping[str, Asset]) -> None:
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader(__package__ or "", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(ago=_ago, utc=_utc, pretty_json=_pretty_json)
        self.env.globals.update(
            base=prefix,
            asset=lambda name: f"{prefix}/assets/{name}?v={assets[name].digest}",
        )

    def render(self, template: str, context: Mapping[str, Any]) -> bytes:
        return self.env.get_template(template).render(context).encode("utf-8")


class PageCache:
    """Rendered pages by (request host, path and query, tree size), briefly (rule 4)."""

    def __init__(self) -> None:
        self._pages: OrderedDict[tuple[str, int], tuple[float, int, bytes]] = OrderedDict()

    def get(self, key: tuple[str, int]) -> tuple[int, bytes] | None:
        found = self._pages.get(key)
        if found is None or found[0] < time.monotonic():
            return None
        self._pages.move_to_end(key)
        return found[1], found[2]

    def put(self, key: tuple[str, int], status: int, body: bytes) -> None:
        self._pages[key] = (time.monotonic() + CACHE_SECONDS, status, body)
        self._pages.move_to_end(key)
        while len(self._pages) > CACHE_ENTRIES:
            self._pages.popitem(last=False)

    def __len__(self) -> int:
        return len(self._pages)


def asset_response(asset: Asset, requested_digest: str | None) -> web.Response:
    """An asset with long caching when the URL names its current digest (rule 3)."""
    immutable = requested_digest == asset.digest
    return web.Response(
        body=asset.body,
        content_type=asset.content_type,
        charset="utf-8",
        headers={
            "Cache-Control": "public, max-age=31536000, immutable"
            if immutable
            else "public, max-age=300",
            "ETag": f'"{asset.digest}"',
            "X-Content-Type-Options": "nosniff",
        },
    )
