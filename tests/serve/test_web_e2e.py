"""The page end to end in headless Debian Chromium driven by Playwright: search, play, timeline.

Screenshots land in ``tests/artifacts/`` (git-ignored) for a human to look at.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from howtocap.search.query import Searcher
from howtocap.serve import create_app
from tests.support.search import ServerThread, encoder, shared_run

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--autoplay-policy=no-user-gesture-required"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    run = shared_run(tmp_path_factory.mktemp("web"))
    with ServerThread(create_app(run, searcher=Searcher.open(run, encoder()))) as srv:
        yield srv


@pytest.fixture(scope="module")
def page(server: ServerThread) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1100, "height": 900})
        errors: list[str] = []
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        pg.errors = errors  # type: ignore[attr-defined]
        yield pg
        browser.close()


@pytest.mark.slow
def test_search_click_and_play(page, server: ServerThread) -> None:  # type: ignore[no-untyped-def]
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto(server.url + "/")
    page.wait_for_function("document.getElementById('info').textContent.includes('clips')")
    page.fill("#q", "launch the rocket")
    page.press("#q", "Enter")
    page.wait_for_selector(".card")
    cards = page.locator(".card")
    assert cards.count() == 6  # k=10 but the run has 6 clips
    first = cards.nth(0)
    assert first.locator(".caption").inner_text() == "launch the rocket"
    assert first.get_attribute("data-video") == "kitchen"
    start = float(first.get_attribute("data-start"))
    assert start == 6.0
    # the thumbnail really loaded (a decoded JPEG, not a broken image)
    page.wait_for_function("[...document.querySelectorAll('.card img.thumb')]"
                           ".every(i => i.complete && i.naturalWidth > 0)")
    assert "Then we wait for the countdown" in first.locator(".context").inner_text()

    first.click()
    page.wait_for_selector("#player-box:not([hidden])")
    # playing: the position moves past the clip start (the sample video is H.264 in MP4)
    page.wait_for_function(f"(() => {{ const v = document.getElementById('player');"
                           f" return !v.paused && v.currentTime > {start + 0.5}; }})()",
                           timeout=20_000)
    t = page.evaluate("document.getElementById('player').currentTime")
    assert start + 0.5 < t < start + 4.0
    assert page.evaluate("document.getElementById('player').error") is None
    page.screenshot(path=str(ARTIFACTS / "web_search.png"), full_page=True)

    # a paraphrase sharing no word with its caption: found by meaning, not by string
    page.fill("#q", "a cat being groomed with a brush")
    page.press("#q", "Enter")
    page.wait_for_function("document.querySelector('.card .caption')?.textContent"
                           " === \"brush the cat's fur\"", timeout=20_000)
    assert page.locator(".card").nth(0).get_attribute("data-video") == "kitchen"
    assert float(page.locator(".card").nth(0).get_attribute("data-start")) == 3.0

    page.fill("#q", "")
    page.evaluate("document.getElementById('q').required = false")
    page.press("#q", "Enter")
    page.wait_for_selector(".status.error")
    assert "empty query" in page.inner_text("#status")
    assert page.errors == []  # type: ignore[attr-defined]


@pytest.mark.slow
def test_video_page_timeline(page, server: ServerThread) -> None:  # type: ignore[no-untyped-def]
    page.goto(server.url + "/?q=check+the+motorcycle+tires&by=both")
    page.wait_for_selector(".card")
    page.locator(".card .vid").first.click()
    page.wait_for_url("**/video/garage")
    page.wait_for_selector("#timeline svg")
    assert page.locator("#timeline rect.asr").count() == 3
    assert page.locator("#timeline rect.llm").count() == 4
    assert page.locator("#timeline rect.aligned").count() == 3
    assert page.locator("#timeline rect.dropped").count() == 1
    assert page.locator("#captions tr").count() == 4
    assert "aligned" in page.inner_text("#status")
    page.locator("#captions tr").nth(2).click()  # seeks the player to that caption
    page.wait_for_function("document.getElementById('player').currentTime > 2.9")
    page.screenshot(path=str(ARTIFACTS / "web_video.png"), full_page=True)
    page.goto(server.url + "/video/no-such-video")
    page.wait_for_selector(".status.error")
    assert "unknown video id" in page.inner_text("#status")
    assert page.errors == []  # type: ignore[attr-defined]
