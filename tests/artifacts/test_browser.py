"""An image artifact uploaded over the API shows inline on the run page in Chromium, beside a
CSV shown as a table."""

from __future__ import annotations

import math
import struct
import zlib
from typing import Any

import pytest

from tests.fixtures.browser import login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.live]


def loss_curve_png(width: int = 360, height: int = 220) -> bytes:
    """A small PNG of a falling loss curve on axes, drawn pixel by pixel (no plotting library here)."""
    pixels = [[(255, 255, 255)] * width for _ in range(height)]
    for x in range(30, width - 10):
        pixels[height - 25][x] = (60, 60, 60)
    for y in range(10, height - 24):
        pixels[y][30] = (60, 60, 60)
    for x in range(31, width - 10):
        t = (x - 31) / (width - 41)
        y = int(15 + (height - 50) * (1 - math.exp(-4 * t)) + 6 * math.sin(25 * t) * (1 - t))
        for dy in (-1, 0, 1):
            pixels[max(0, min(height - 1, y + dy))][x] = (47, 93, 138)
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in pixels)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def test_image_artifact_shows_inline_on_the_run_page(live_stack: Any, browser_page: Any) -> None:
    page = browser_page
    token = live_stack.token("alice")
    tags = {"task": "digits", "dataset": "sklearn-digits", "candidate": "baseline", "family": "artifacts-page"}
    run = live_stack.api("POST", "/api/v1/runs/", {"project": "vision/digits", "template": "digits-classifier", "params": {},
                                                   "tags": tags}, token=token, expect=201)
    base = f"{live_stack.url}/api/v1/runs/{run['id']}/artifacts/"
    auth = {"Authorization": f"Token {token}"}
    png = loss_curve_png()
    csv = b"step,loss,accuracy\n1,2.30,0.11\n2,1.10,0.62\n3,0.41,0.88\n"
    for fields in ({"file": {"name": "loss.png", "mimeType": "image/png", "buffer": png}, "name": "plots/loss.png"},
                   {"file": {"name": "metrics.csv", "mimeType": "text/csv", "buffer": csv}},
                   {"file": {"name": "model.pt", "mimeType": "application/octet-stream", "buffer": b"\x00" * 4096}}):
        resp = page.request.post(base, multipart=fields, headers=auth)
        assert resp.status == 201, resp.text()

    login(page, live_stack, "alice")
    page.goto(f"{live_stack.url}/runs/{run['id']}/")
    card = page.locator("#run-artifacts")
    image = card.locator("img[alt='plots/loss.png']")
    image.scroll_into_view_if_needed()
    loaded = "() => { const i = document.querySelector('#run-artifacts img'); return i && i.complete && i.naturalWidth > 0 }"
    page.wait_for_function(loaded, timeout=15_000)
    assert image.evaluate("i => [i.naturalWidth, i.naturalHeight]") == [360, 220]
    assert "accuracy" in card.locator("table").first.inner_text().lower() and "0.88" in card.inner_text()
    assert "model.pt" in card.inner_text()
    live_stack.api("POST", f"/api/v1/runs/{run['id']}/cancel/", {}, token=token)
    card.screenshot(path=str(screenshot(page, "artifacts-run-page")))
