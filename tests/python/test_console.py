"""`warden console` in a real browser (Debian's chromium driven by Selenium): the page lists
the toolbox's tools with their grants, a call made through MCP shows up with its usage, and
the console refuses what it must — a wrong token, a page without the cookie, another Host,
another Origin, a frame — and shows a tool's script-bearing output as text. A screenshot of
each view is kept in target/console-screenshots/."""

import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from urllib.parse import urlsplit

import pytest

from harness import ROOT, QuietHandler, Toolbox, loopback_server, session, warden_bin

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"
SHOTS = ROOT / "target" / "console-screenshots"
# A page that runs it would set this.
SCRIPT = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


@pytest.fixture
def box(tmp_path) -> Toolbox:
    box = Toolbox(tmp_path)
    box.policy("trivial.toml", "trivial")
    box.policy("hostile.toml", "hostile", '[grants]\nenv = { MODE = "demo" }')
    return box


@contextmanager
def console(box: Toolbox):
    """`warden console` on a port of its own; yields the URL it printed."""
    err = box.root / "console.log"
    with open(err, "wb") as log:
        proc = subprocess.Popen(
            [str(warden_bin()), "console"],
            env={**os.environ, **box.env()},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"warden console: (\S+)", err.read_text())):
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.02)
        yield found.group(1)
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        why = "no chromium (apt-get install chromium chromium-driver)"
        assert os.environ.get("CI") != "true", f"CI=true and {why}"
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver, check, what: str, seconds: float = 20):
    """Polls `check(driver)` until it is truthy (a busy machine is slow, never wrong)."""
    deadline = time.monotonic() + seconds
    while not (found := check(driver)):
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)
    return found


def shot(driver, name: str):
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def status(url: str, headers: dict | None = None) -> int:
    """The status of a GET of `url`, redirects not followed."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.build_opener(NoRedirect).open(request) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def text_of(driver, css: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css).text


async def test_the_page_lists_the_tools_and_shows_each_call_as_it_happens(box, browser):
    with console(box) as url:
        browser.get(url)
        # The token was exchanged for a cookie and left the address bar.
        wait_for(browser, lambda d: urlsplit(d.current_url).query == "", "the token dropped")
        tools = wait_for(browser, lambda d: text_of(d, "#tools-list"), "the tools listed")
        assert "add" in tools and "hostile.toml" in tools and "MODE" in tools, tools
        shot(browser, "tools")
        async with session("stdio", box) as s:
            added = await s.call_tool("add", {"a": 2, "b": 3})
            failed = await s.call_tool("fail", {"message": SCRIPT})
        assert added.isError is False and failed.isError is True
        rows = wait_for(
            browser,
            lambda d: (t := text_of(d, "#calls-table tbody")).count("\n") >= 1 and t,
            "both calls shown",
        )
        assert "add" in rows and "success" in rows and "tool_error" in rows, rows
        # The tool's output is text on the page, never markup that runs.
        assert SCRIPT in rows, rows
        assert browser.execute_script("return window.__pwned") is None
        assert "verifies" in text_of(browser, "#ledger-state") or wait_for(
            browser, lambda d: "verifies" in text_of(d, "#ledger-state"), "the ledger checked"
        )
        shot(browser, "calls")


def test_the_console_refuses_a_wrong_token_no_cookie_another_host_or_origin(box):
    with console(box) as url:
        base = url.split("?")[0]
        assert status(url) == 303, "the right token is let in, and sent on to the page"
        assert status(base + "?token=" + "0" * 64) == 401
        assert status(base) == 401, "no cookie"
        assert status(base + "api/calls") == 401
        port = urlsplit(url).port
        assert status(url, {"Host": f"evil.example:{port}"}) == 403, "DNS rebinding"
        assert status(url, {"Origin": "http://evil.example"}) == 403
        try:
            urllib.request.build_opener(NoRedirect).open(url)
        except urllib.error.HTTPError as r:
            policy = r.headers["Content-Security-Policy"]
            assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
            assert r.headers["Referrer-Policy"] == "no-referrer"


def test_a_page_elsewhere_cannot_frame_the_console(box, browser):
    with console(box) as url:
        browser.get(url)
        wait_for(browser, lambda d: text_of(d, "#tools-list"), "the console loaded")

        class Framing(QuietHandler):
            """A page elsewhere framing the console, and a page of its own that may be."""

            def do_GET(self):
                if self.path == "/inner":
                    self.answer(b'<p id="inner">framed</p>', "text/html")
                    return
                page = (
                    '<iframe id="own" src="/inner"></iframe>'
                    f'<iframe id="console" src="{url}"></iframe>'
                )
                self.answer(page.encode(), "text/html")

        from selenium.webdriver.common.by import By

        with loopback_server(Framing) as port:
            # Returns once the page and its frames have loaded (or failed to).
            browser.get(f"http://localhost:{port}/")
            shot(browser, "framed")
            browser.switch_to.frame(browser.find_element(By.ID, "own"))
            assert browser.find_elements(By.ID, "inner"), "a frame that may be shown is"
            browser.switch_to.default_content()
            browser.switch_to.frame(browser.find_element(By.ID, "console"))
            # Refused by the browser: the frame holds an error page, not the console.
            assert not browser.find_elements(By.ID, "tools-list")
            browser.switch_to.default_content()
