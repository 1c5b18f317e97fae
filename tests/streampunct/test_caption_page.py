"""``GET /captions``: the self-contained live-caption page, served and run in a real headless Chromium."""

from __future__ import annotations

import asyncio
import re
import shutil

import pytest

from streampunct.text import normalize_words, render
from tests.streampunct.fakes import ended_or_final_before
from tests.streampunct.test_server_protocol import http_get

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
CHROMEDRIVER = shutil.which("chromedriver")


async def test_caption_page_is_served_and_self_contained(start_server):
    server = await start_server(auth_token="secret")
    status, headers, body = await http_get(server.port, "/captions")  # the page itself needs no token
    assert status == 200 and headers["content-type"].startswith("text/html")
    page = body.decode()
    assert "<script>" in page and "new WebSocket(" in page and '"hypothesis"' in page
    # No outside assets: no external scripts, stylesheets, images or fonts.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", page)


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="needs Chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
async def test_captions_appear_in_headless_chromium(start_server, fake_labels, tmp_path):
    pytest.importorskip("selenium", reason="needs selenium (the dev extra)")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = await start_server(auth_token="tok")
    url = f"http://127.0.0.1:{server.port}/captions?token=tok&wps=40"

    def drive():
        options = Options()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1100,700"):
            options.add_argument(arg)
        driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
        try:
            driver.set_page_load_timeout(30)
            driver.get(url)
            driver.find_element(By.ID, "sample").click()
            driver.find_element(By.ID, "start").click()
            WebDriverWait(driver, 60).until(lambda d: d.execute_script("return window.captionStats.ended"))
            return (
                driver.find_element(By.ID, "finals").text,
                driver.execute_script("return window.captionStats"),
                driver.execute_script("return asrWords(SAMPLE)"),
                driver.find_element(By.ID, "p50").text,
                driver.find_element(By.ID, "final").text,
            )
        finally:
            driver.quit()

    finals, stats, sent, p50, n_final = await asyncio.wait_for(asyncio.to_thread(drive), 120)
    words = normalize_words(sent)
    assert len(words) > 40
    assert finals in [render(words, labels, capitalize=True) for labels in ended_or_final_before(fake_labels(words))]
    assert any(mark in finals for mark in ".,?") and finals[0].isupper()
    assert stats["errors"] == [] and stats["partialsWithHypothesis"] > 0
    assert n_final == str(len(words)) and p50.endswith("ms")
