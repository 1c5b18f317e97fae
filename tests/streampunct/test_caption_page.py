"""``GET /captions``: the self-contained live-caption page, served and run in a real headless Chromium."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil

import pytest

from streampunct.text.normalize import normalize_word, normalize_words, render, surface_affixes
from tests.streampunct.fakes import ended, ended_or_final_before, until
from tests.streampunct.tcp_proxy import FreezingProxy, TcpProxy
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
    # its own inline script and style only (by hash; the Chromium tests run it under this
    # policy), WebSockets, no framing, no referrer (its URL may hold ?token=)
    import base64
    import hashlib

    (script,) = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    policy = headers["content-security-policy"]
    assert f"script-src 'sha256-{digest}'" in policy and "default-src 'none'" in policy
    assert "connect-src ws: wss:" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy
    assert headers["x-frame-options"] == "DENY" and headers["referrer-policy"] == "no-referrer"
    assert headers["x-content-type-options"] == "nosniff"


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
            driver.find_element(By.ID, "start").click()  # nothing pasted: the built-in sample
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


@contextlib.contextmanager
def _started_page(profile, url: str, text: str | None = None, *, samples: int = 0):
    """Headless Chromium on the caption page at ``url``, ``text`` (or else the built-in sample
    ``samples`` times over) pasted and started; quit after."""
    from selenium.webdriver.common.by import By

    driver = _headless_chromium(profile)
    try:
        driver.get(url)
        if text is None:
            driver.execute_script("document.getElementById('text').value = (SAMPLE + ' ').repeat(arguments[0])",
                                  samples)
        else:
            driver.execute_script("document.getElementById('text').value = arguments[0]", text)
        driver.find_element(By.ID, "start").click()
        yield driver
    finally:
        driver.quit()


def _ended_or_closed(driver) -> bool:
    """Whether the page's stream ended, or the page says it closed (what the tests wait for last)."""
    from selenium.webdriver.common.by import By

    if driver.execute_script("return window.captionStats.ended"):
        return True
    return "closed" in driver.find_element(By.ID, "status").text


def _headless_chromium(profile):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--user-data-dir={profile}", "--window-size=1100,700"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    return driver


def _rejected(server, reason: str) -> float:
    return server.metrics.registry.get_sample_value("streampunct_handshakes_rejected_total", {"reason": reason})


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="needs Chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
async def test_the_page_asks_before_sending_a_token_to_another_server(start_server, tmp_path):
    pytest.importorskip("selenium", reason="needs selenium (the dev extra)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    page = await start_server()
    other = await start_server(auth_token="tok")
    # A link that points the page at another server and pre-fills a token.
    url = f"http://127.0.0.1:{page.port}/captions?url=ws://localhost:{other.port}/v1/stream&token=tok"

    def drive():
        driver = _headless_chromium(tmp_path / "profile")
        try:
            driver.get(url)
            warning = driver.find_element(By.ID, "elsewhere").text
            driver.find_element(By.ID, "sample").click()
            driver.find_element(By.ID, "start").click()
            alert = WebDriverWait(driver, 10).until(expected_conditions.alert_is_present())
            asked = alert.text
            alert.dismiss()
            declined = driver.find_element(By.ID, "status").text
            opened_after_decline = other.metrics.registry.get_sample_value("streampunct_sessions_opened_total")
            refusals_after_decline = sum(_rejected(other, r) for r in ("origin", "auth"))
            driver.find_element(By.ID, "start").click()
            WebDriverWait(driver, 10).until(expected_conditions.alert_is_present()).accept()
            WebDriverWait(driver, 30).until(lambda d: "closed" in d.find_element(By.ID, "status").text)
            # Back to the page's own server: no warning, no question.
            field = driver.find_element(By.ID, "url")
            field.clear()
            field.send_keys(f"ws://127.0.0.1:{page.port}/v1/stream")
            return warning, asked, declined, opened_after_decline, refusals_after_decline, \
                driver.find_element(By.ID, "elsewhere").text
        finally:
            driver.quit()

    warning, asked, declined, opened, refused, after = await asyncio.wait_for(asyncio.to_thread(drive), 120)
    assert f"localhost:{other.port} is not the server this page came from (127.0.0.1:{page.port})" in warning
    assert "the token and the transcript will be sent to it" in warning
    assert f"Connect to localhost:{other.port}" in asked and "send it the token and the transcript?" in asked
    assert declined == "not connected: the other server was not confirmed"
    assert opened == 0 and refused == 0  # declining sent nothing
    # Accepted: the browser connects, and the other server refuses the page's origin before the token.
    assert _rejected(other, "origin") == 1.0 and _rejected(other, "auth") == 0.0
    assert other.metrics.registry.get_sample_value("streampunct_sessions_opened_total") == 0
    assert after == ""


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="needs Chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
async def test_captions_are_announced_scroll_back_and_say_why_a_stream_closed(start_server, tmp_path):
    """Screen readers get the captions (a polite log; the interim words hidden) and the status;
    a viewer who scrolls back keeps the text read while finals arrive; a server that shuts
    down mid-stream is named as such, and the dimmed interim words go."""
    pytest.importorskip("selenium", reason="needs selenium (the dev extra)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = await start_server()
    url = f"http://127.0.0.1:{server.port}/captions?token=t&wps=30"
    shutting_down = asyncio.Event()
    loop = asyncio.get_running_loop()

    def drive():
        driver = _headless_chromium(tmp_path / "profile")
        try:
            driver.get(url)
            js = driver.execute_script
            roles = js("return ['captions', 'status', 'partial'].map((id) => [document.getElementById(id).getAttribute"
                       "('role'), document.getElementById(id).getAttribute('aria-live'), document.getElementById(id)"
                       ".getAttribute('aria-hidden')])")
            kept_out_of_url = js("return location.search")
            js("document.getElementById('text').value = (SAMPLE + ' ').repeat(8)")
            driver.find_element(By.ID, "start").click()
            WebDriverWait(driver, 60).until(  # more lines than the box shows
                lambda d: js("const b = document.getElementById('captions'); return b.scrollHeight > b.clientHeight + 80"))
            js("document.getElementById('captions').scrollTop = -40")  # back a little from the newest line
            back = js("return document.getElementById('captions').scrollTop")
            finals = js("return window.captionStats.finals")
            WebDriverWait(driver, 60).until(lambda d: js("return window.captionStats.finals") >= finals + 5)
            after = js("return document.getElementById('captions').scrollTop")
            loop.call_soon_threadsafe(shutting_down.set)
            WebDriverWait(driver, 60).until(
                lambda d: any(s in d.find_element(By.ID, "status").text for s in ("reconnecting", "closed")))
            return (roles, kept_out_of_url, back, after, driver.find_element(By.ID, "status").text,
                    driver.find_element(By.ID, "partial").text)
        finally:
            driver.quit()

    driving = asyncio.create_task(asyncio.wait_for(asyncio.to_thread(drive), 150))
    await shutting_down.wait()
    await server.shutdown()
    roles, search, back, after, status, partial = await driving
    assert roles == [["log", "polite", None], ["status", None, None], [None, None, "true"]]
    assert "token" not in search and "wps=30" in search
    assert back < 0 and after < back  # the view stayed on the text read while new lines came below
    # 1001 is one of the closes the page resumes after (here no server comes back)
    assert status == "reconnecting (1001: the server is shutting down)…" and partial == ""


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="needs Chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
async def test_the_page_resumes_a_stream_across_a_server_restart(start_server, fake_labels, tmp_path):
    """``serve --drain resume`` closes the page's stream with 1012 mid-stream; the server's
    address refuses connections for a while, then a new server answers there. The page
    reconnects (token and all), resumes, sends again the words without a final and those
    whose time came meanwhile, and its captions hold every word exactly once, in order."""
    pytest.importorskip("selenium", reason="needs selenium (the dev extra)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    old = await start_server(auth_token="tok", drain="resume")
    new = await start_server(auth_token="tok")
    address = await TcpProxy(old.port).start()  # the address the page knows: the old server, then the new one
    loop = asyncio.get_running_loop()

    def route_to_new() -> None:
        address.target = new.port

    def drive():
        url = f"http://127.0.0.1:{address.port}/captions?token=tok&wps=40"
        # 130 words, 3.25 s of them: the drain comes in the first second
        with _started_page(tmp_path / "profile", url, samples=2) as driver:
            js = driver.execute_script
            WebDriverWait(driver, 60).until(lambda d: js("return window.captionStats.finals") >= 5)
            # Drained: the page's connection closes with 1012 at once, and the old server goes on
            # closing (it waits for Chromium's idle preconnected socket) while the page retries.
            drained = asyncio.run_coroutine_threadsafe(old.shutdown(), loop)
            # The address refuses the page's first attempt (503, or nothing listens behind it) ...
            WebDriverWait(driver, 30).until(lambda d: js("return window.captionStats.reconnects || 0") >= 2
                                            or "closed" in d.find_element(By.ID, "status").text)
            during = driver.find_element(By.ID, "status").text
            loop.call_soon_threadsafe(route_to_new)  # ... then the restarted server answers there
            WebDriverWait(driver, 60).until(_ended_or_closed)
            drained.result(30)
            return (during, driver.find_element(By.ID, "status").text, driver.find_element(By.ID, "finals").text,
                    js("return window.captionStats"), js("return asrWords(document.getElementById('text').value)"))

    try:
        during, status, finals, stats, sent = await asyncio.wait_for(asyncio.to_thread(drive), 150)
    finally:
        await address.close()
    words = normalize_words(sent)
    assert during == "reconnecting (1012: the server is restarting)…"
    assert stats["ended"] and status == f"done: {len(words)} words" and stats["errors"] == []
    assert stats["resumes"] == 1 and stats["reconnects"] >= 2 and stats["resent"] > 0
    # Every word once, in order: the captions are the stream written in one piece.
    assert finals in [render(words, labels, capitalize=True) for labels in ended_or_final_before(fake_labels(words))]
    received = [server.metrics.words_in._value.get() for server in (old, new)]
    assert received[1] < len(words) <= sum(received)  # the new server got only the rest


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="needs Chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
async def test_the_page_says_when_the_server_leaves_written_numbers_out(start_server, tmp_path):
    # A server without the ITN grammars ignores a session's itn and leaves it out of its answer.
    pytest.importorskip("selenium", reason="needs selenium (the dev extra)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = await start_server()
    url = f"http://127.0.0.1:{server.port}/captions?wps=40"

    def drive():
        driver = _headless_chromium(tmp_path / "profile")
        try:
            driver.get(url)
            driver.find_element(By.ID, "itn").click()
            driver.find_element(By.ID, "sample").click()
            driver.find_element(By.ID, "start").click()
            WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "status").text != "connecting")
            said = driver.find_element(By.ID, "status").text
            WebDriverWait(driver, 60).until(lambda d: d.execute_script("return window.captionStats.ended"))
            return said, driver.execute_script("return window.captionStats")
        finally:
            driver.quit()

    said, stats = await asyncio.wait_for(asyncio.to_thread(drive), 120)
    assert said == "streaming (numbers stay in words: itn is not available on this server)"
    assert stats["errors"] == [] and stats["finals"] > 0


#: Words the page and the server must count alike (each normalizes to a word, or each to none).
TRICKY_WORDS = ["Hello,", "don’t", "ʼ", "\u3164", "a\u200bb", "ﹰ", "Café", "cafe\u0301", "'cause", "--",
                "Ｗｏｒｌｄ", "e.g.", "x²", "İstanbul", "ß", "naïve!", "…", "¿qué?", "rock'n'roll", "`tis",
                "'no", "'yes'", "'90s", "students'", "'Til", "‘Em", "'½", "'Ⅻ", "'〇"]


def test_the_page_keeps_the_server_s_list_of_words_a_leading_apostrophe_belongs_to():
    """captions.html's copy of ELISIONS (its asrWords drops a quote's opening as the server does)."""
    from pathlib import Path

    from streampunct.text.normalize import ELISIONS

    page = (Path(__file__).resolve().parents[2] / "streampunct" / "server" / "static" / "captions.html").read_text()
    listed = re.search(r"const ELISIONS = new Set\(\[(.*?)\]\);", page).group(1)
    assert set(re.findall(r'"([^"]*)"', listed)) == set(ELISIONS)


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="needs Chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
async def test_the_page_counts_words_as_the_server_does_and_resumes_only_what_it_tracked(start_server, tmp_path):
    """A resume sends again the words from the first without a final, by the page's count. The
    page writes words as the server normalizes them; where the two still differ (an accent on a
    period at the end of a word: the server strips the period with its mark, the page keeps
    both), a final shows it and the stream is not resumed, rather than resumed from the wrong
    word."""
    pytest.importorskip("selenium", reason="needs selenium (the dev extra)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = await start_server(drain="resume")
    loop = asyncio.get_running_loop()

    def drive():
        driver = _headless_chromium(tmp_path / "profile")
        js = driver.execute_script
        try:
            driver.get(f"http://127.0.0.1:{server.port}/captions?wps=40")
            page_words = js("return arguments[0].map((w) => asrWords(w))", TRICKY_WORDS)
            js("document.getElementById('text').value = arguments[0] + ' ' + SAMPLE", "so.\u0301")
            driver.find_element(By.ID, "start").click()
            WebDriverWait(driver, 60).until(lambda d: js("return window.captionStats.finals") >= 5)
            asyncio.run_coroutine_threadsafe(server.shutdown(), loop).result(30)
            WebDriverWait(driver, 30).until(lambda d: "closed" in d.find_element(By.ID, "status").text)
            return page_words, driver.find_element(By.ID, "status").text, js("return window.captionStats")
        finally:
            driver.quit()

    page_words, status, stats = await asyncio.wait_for(asyncio.to_thread(drive), 120)
    assert page_words == [[w] if w else [] for w in map(normalize_word, TRICKY_WORDS)]
    assert status == ("closed (1012: the server is restarting); not resumed: the server refused or counted "
                      "otherwise a word this page sent")
    assert stats["resumes"] == 0 and stats["reconnects"] == 0


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="needs Chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
async def test_after_an_idle_close_the_page_resumes_with_its_next_words(start_server, fake_labels, tmp_path, caplog):
    """A server's idle timeout finishes a quiet stream's words and closes it (1001, "idle
    timeout"). Owed nothing, the page waits for its next words and resumes with them: it
    does not reconnect at once into the same timeout (every session on the server gets
    words), and the captions still hold every word once, in order."""
    pytest.importorskip("selenium", reason="needs selenium (the dev extra)")
    import logging

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    caplog.set_level(logging.INFO, logger="streampunct")
    server = await start_server(idle_timeout_s=0.4)
    text = "so we went home and then we slept well"

    def drive():
        # 1.5 words/s: 0.67 s between the page's frames, past the server's 0.4 s
        with _started_page(tmp_path / "profile", f"http://127.0.0.1:{server.port}/captions?wps=1.5", text) as driver:
            js = driver.execute_script
            WebDriverWait(driver, 60).until(lambda d: js("return window.captionStats.idleCloses") >= 1)
            parked = driver.find_element(By.ID, "status").text
            WebDriverWait(driver, 60).until(_ended_or_closed)
            return (parked, driver.find_element(By.ID, "status").text, driver.find_element(By.ID, "finals").text,
                    js("return window.captionStats"))

    parked, status, finals, stats = await asyncio.wait_for(asyncio.to_thread(drive), 120)
    words = normalize_words(text.split())
    # read within 0.3 s of the close, when the page's next frame is due: parked, or resuming
    assert parked in ("idle: every word is final; the stream resumes with the next words",
                      "reconnecting (1001: the stream was idle too long)…") or parked.startswith("streaming")
    assert stats["ended"] and status == f"done: {len(words)} words" and stats["errors"] == []
    assert stats["idleCloses"] >= 1 and stats["reconnects"] == stats["resumes"] >= 1
    assert finals in [render(words, labels, capitalize=True) for labels in ended_or_final_before(fake_labels(words))]

    def closed() -> list[str]:
        return [r.getMessage() for r in caplog.records if re.search(r"^session=\w+ closed: code", r.getMessage())]

    await until(lambda: len(closed()) >= stats["resumes"] + 1)  # the last session's line may come after
    closed = closed()
    assert len(closed) == stats["resumes"] + 1
    # each session's count runs from word 0 (a resumed one's from its start): every resumed
    # session got words (the first may close before the page's first word, 0.67 s in)
    counts = [int(re.search(r", (\d+) words, ", line).group(1)) for line in closed]
    assert counts == sorted(set(counts)) and counts[-1] == len(words)


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason="needs chromium and chromedriver")
async def test_the_page_keeps_the_symbols_around_words(start_server, tmp_path):
    """Typed "$1,000", "50%" and "c++" keep their symbols in the captions (the page sends the
    words as typed; the server writes the symbols back), and the words are counted as before.
    A word of symbols alone ("&", an emoji) is sent too and shown where it stood, with no index."""
    pytest.importorskip("selenium", reason="needs selenium (the dev extra)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = await start_server()
    typed = "so we paid $1,000, a 50% rise, for c++ & rock \U0001f3b8 books"

    def drive():
        with _started_page(tmp_path / "profile", f"http://127.0.0.1:{server.port}/captions?wps=40", typed) as driver:
            js = driver.execute_script
            WebDriverWait(driver, 60).until(lambda d: js("return window.captionStats.ended"))
            return (driver.find_element(By.ID, "finals").text, driver.find_element(By.ID, "sent").text,
                    js("return window.captionStats"))

    finals, sent, stats = await asyncio.wait_for(asyncio.to_thread(drive), 120)
    assert stats["errors"] == [] and stats["resumes"] == 0
    indexed = [w for w in typed.split() if normalize_word(w)]
    expected = render(normalize_words(indexed), [0] * 11, affixes=[surface_affixes(w) for w in indexed]).split()
    expected[9:9] = ["&"]  # before "rock"
    expected[11:11] = ["\U0001f3b8"]  # before "books"
    assert sent == "11"
    assert [t.rstrip(",.?").lower() for t in finals.split()] == expected  # "$1,000" ... "50%" ... "c++" "&"


async def _hang(address: FreezingProxy, other) -> None:
    """The replica behind ``address`` hangs; new connections go to ``other``."""
    address.freeze()
    address.target = other.port


class _ThawingProxy(FreezingProxy):
    """:class:`FreezingProxy` whose frozen connections can go on again (:meth:`thaw`): the hung
    replica wakes up (SIGCONT) and sends what it had to the page's old connection."""

    def thaw(self) -> None:
        self._never.set()


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="needs Chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
async def test_the_page_leaves_a_server_that_hangs_while_it_owes_finals(start_server, fake_labels, tmp_path):
    """The replica behind the page's address hangs mid-stream without closing its socket (no close,
    no reset: the proxy stops forwarding), and new connections go to another server. The page's
    words keep going out and the hung server owes their finals: silent for the page's
    ``?silence_timeout_s=3``, the connection is dropped and the stream resumes on the other
    server, every word once. When the hung server wakes, what it sends to the old connection
    changes nothing."""
    pytest.importorskip("selenium", reason="needs selenium (the dev extra)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    hung = await start_server(auth_token="tok")
    other = await start_server(auth_token="tok")
    loop = asyncio.get_running_loop()

    def drive():
        url = f"http://127.0.0.1:{address.port}/captions?token=tok&wps=20&silence_timeout_s=3"
        # 130 words, 6.5 s of them: the hang comes in the first second, the cut 3 s later
        with _started_page(tmp_path / "profile", url, samples=2) as driver:
            js = driver.execute_script
            WebDriverWait(driver, 60, 0.05).until(lambda d: js("return window.captionStats.finals") >= 5)
            # the server hangs; a balancer sends new connections to the other server
            asyncio.run_coroutine_threadsafe(_hang(address, other), loop).result(10)
            # words keep going out, the hung server owes their finals and sends nothing
            WebDriverWait(driver, 30, 0.05).until(lambda d: js("return window.captionStats.resumes") >= 1
                                                  or "closed" in d.find_element(By.ID, "status").text)
            loop.call_soon_threadsafe(address.thaw)  # the hung server goes on, on the old connection
            WebDriverWait(driver, 60).until(_ended_or_closed)
            return (driver.find_element(By.ID, "status").text, driver.find_element(By.ID, "finals").text,
                    js("return window.captionStats"), js("return asrWords(document.getElementById('text').value)"))

    async with _ThawingProxy(hung.port) as address:
        status, finals, stats, sent = await asyncio.wait_for(asyncio.to_thread(drive), 150)
    words = normalize_words(sent)
    assert stats["ended"] and status == f"done: {len(words)} words" and stats["errors"] == []
    assert stats["resumes"] == 1 and stats["reconnects"] == 1 and stats["resent"] > 0
    [silent] = stats["silences"]
    assert silent >= 3
    assert finals in [render(words, labels, capitalize=True) for labels in ended_or_final_before(fake_labels(words))]
    assert other.metrics.words_in._value.get() < len(words)  # it got only the rest
    assert address.connections >= 2


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="needs Chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
async def test_the_page_waits_out_a_silence_while_the_server_owes_nothing(start_server, fake_labels, tmp_path):
    """Three words at 0.5 words/s, a right context of 3 and a delay bound of 10 minutes: the
    server owes no final until the page's ``end``, 6 s in, so its silence (it hangs before the
    first word) is not taken for a loss before: the connection is dropped ``silence_timeout_s``
    after the end, and the stream ends on the other server."""
    pytest.importorskip("selenium", reason="needs selenium (the dev extra)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    hung = await start_server()
    other = await start_server()
    loop = asyncio.get_running_loop()
    text = "so we went"

    def drive():
        driver = _headless_chromium(tmp_path / "profile")
        js = driver.execute_script
        try:
            driver.get(f"http://127.0.0.1:{address.port}/captions?wps=0.5&silence_timeout_s=0.5")
            js("document.getElementById('text').value = arguments[0]; document.getElementById('delay').value = 600000",
               text)
            driver.find_element(By.ID, "start").click()
            # the page's first frame after `config` comes 2 s later
            WebDriverWait(driver, 30, 0.02).until(lambda d: d.find_element(By.ID, "status").text == "streaming")
            asyncio.run_coroutine_threadsafe(_hang(address, other), loop).result(10)
            WebDriverWait(driver, 60).until(_ended_or_closed)
            return driver.find_element(By.ID, "status").text, driver.find_element(By.ID, "finals").text, \
                js("return window.captionStats")
        finally:
            driver.quit()

    async with FreezingProxy(hung.port) as address:
        status, finals, stats = await asyncio.wait_for(asyncio.to_thread(drive), 120)
    words = normalize_words(text.split())
    assert stats["ended"] and status == "done: 3 words" and stats["resumes"] == 1
    # silent from `config` (or at worst its first word) on: 6 s owing nothing, then the timeout
    # past the end; a page that took the first word or hypothesis for owed cut at 2.5 s
    [silent] = stats["silences"]
    assert silent >= 4
    assert finals == render(words, ended(fake_labels(words)), capitalize=True)
    assert other.metrics.words_in._value.get() == 3  # every word again: none had a final

