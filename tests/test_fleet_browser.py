"""The results service's pages in a real browser (Debian's Chromium, headless, driven by Selenium through Debian's
chromedriver; nothing is downloaded): the ranking, ECDF, run, device and comparison pages render with their plots,
on SQLite and on PostgreSQL. Screenshots are kept in artifacts/tests/fleet-browser/."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from fleet_support import ARTIFACTS, get_json, post, postgres, submission

from smartio.fleet.tempdb import Server

pytestmark = pytest.mark.timeout(240)

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SHOTS = ARTIFACTS / "fleet-browser"


def _browser_unavailable() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    for path, pkg in ((CHROMIUM, "chromium"), (DRIVER, "chromium-driver")):
        if not shutil.which(path):
            return f"{path} is missing (Debian package {pkg}; scripts/install-deps installs it)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = _browser_unavailable()
    if reason:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"       # Selenium Manager must not look for a browser or driver to download
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1200,1400", "--no-first-run", "--disable-extensions"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def filled(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Server,
                                                                                                      list[str]]]:
    """A server with five runs each of four devices (three models, one emulated) and their slugs."""
    def run(db: str) -> Iterator[tuple[str, Server, list[str]]]:
        s = Server(db).start()
        slugs = []
        try:
            for model, lat, emulated in (("Acme X1", 0.3, None), ("Acme X1", 0.6, None), ("Globex <b>Pro</b>", 0.8,
                                                                                          None),
                                         ("Initech 5", 1.5, None), ("s5", 3.0, "s5-emmc")):
                dev = secrets.token_hex(16)
                for i in range(5):
                    _, out = post(s.url, submission(model, lat * (1 + i / 20), dev, profile=emulated,
                                                    started=f"2026-11-{10 + i}T08:00:00+00:00",
                                                    iowait=lat * 2 + i / 10))
                    slugs.append(out["slug"])
            yield request.param, s, slugs
        finally:
            s.stop()

    if request.param == "sqlite":
        yield from run(str(tmp_path_factory.mktemp("fleet") / "fleet.db"))
    else:
        with postgres() as pg:
            yield from run(pg.new_database("browser"))


def _visit(driver: Any, url: str, name: str, db: str) -> Any:
    from selenium.webdriver.common.by import By

    driver.get(url)
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{db}-{name}.png"))
    imgs = driver.find_elements(By.CSS_SELECTOR, "img.plot")
    assert imgs, f"{name}: no plot"
    for img in imgs:        # the image arrived and decoded (an SVG that failed would have no natural size)
        assert driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", img), name
    return driver


def test_the_pages_render_with_their_plots(browser: Any, filled: tuple[str, Server, list[str]]) -> None:
    from selenium.webdriver.common.by import By

    db, server, slugs = filled
    d = _visit(browser, f"{server.url}/ranking", "ranking", db)
    cells = [td.text for td in d.find_elements(By.CSS_SELECTOR, "table tr td:nth-child(2)")]
    assert cells[:3] == ["Acme X1", "Globex <b>Pro</b>", "Initech 5"]      # escaped, shown as typed
    assert "s5" not in " ".join(cells)                                       # emulated: left out by default
    d = _visit(browser, f"{server.url}/ranking?include=emulated", "ranking-with-emulated", db)
    assert "emulated" in d.find_element(By.TAG_NAME, "table").text
    d = _visit(browser, f"{server.url}/ecdf", "ecdf", db)
    assert "seq read" in d.find_element(By.TAG_NAME, "table").text
    _visit(browser, f"{server.url}/ecdf?metric=iowait_pct", "ecdf-iowait", db)
    d = _visit(browser, f"{server.url}/runs/{slugs[0]}", "run", db)
    assert "Acme X1" in d.page_source
    d.find_element(By.LINK_TEXT, "Acme X1").click()
    assert "Device Acme X1" in d.title and len(d.find_elements(By.CSS_SELECTOR, "table tr")) == 6
    _visit(browser, d.current_url, "device", db)
    d = _visit(browser, f"{server.url}/compare?a={slugs[0]}&b={slugs[12]}", "compare", db)
    assert "B / A" in d.page_source and "Not comparable" not in d.page_source
    assert get_json(f"{server.url}/ranking.json")["rows"][0]["model"] == "Acme X1"
