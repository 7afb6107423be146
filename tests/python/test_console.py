"""`warden console` in a real browser (Debian's chromium driven by Selenium): the page lists
the toolbox's tools with their grants, a call made through MCP shows up with its usage, a call
waiting for review under `warden serve --console` is approved or rejected with a click, and
the console refuses what it must — a wrong token, a page without the cookie, another Host,
another Origin, a frame, a decision from elsewhere — and shows a tool's script-bearing output
as text. A screenshot of each view is kept in target/console-screenshots/."""

import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from urllib.parse import urlsplit

import anyio
import pytest

from harness import (
    ROOT,
    QuietHandler,
    Toolbox,
    connect,
    http_server,
    loopback_server,
    session,
    warden_bin,
)

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
    box.policy("netprobe.toml", "netprobe", '[grants]\nnet = ["example.test"]', top='prefix = "np_"')
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
            # A destination the policy does not grant: refused, and the page says so.
            refused = await s.call_tool(
                "np_http", {"method": "GET", "url": "http://10.1.2.3/", "headers": []}
            )
        assert added.isError is False and failed.isError is True
        assert "10.1.2.3" in refused.content[0].text, refused.content[0].text
        rows = wait_for(
            browser,
            lambda d: (t := text_of(d, "#calls-table tbody")).count("\n") >= 2 and t,
            "the three calls shown",
        )
        assert "add" in rows and "success" in rows and "tool_error" in rows, rows
        assert "1 refused" in rows, rows
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


def decide_on_page(browser, label: str, words: str = "", arguments: str | None = None):
    """Waits for a call on the page, then clicks `label` having typed `words` (a reason or an
    answer) and, for an edit, the new `arguments`."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def pending(d):
        # The newest card still undecided: one decided just now (its buttons disabled) may
        # not have gone from the page yet.
        try:
            cards = [
                c for c in d.find_elements(By.CSS_SELECTOR, "#pending .pending")
                if c.find_element(By.TAG_NAME, "button").is_enabled()
            ]
        except StaleElementReferenceException:
            return None  # the page removed a card meanwhile: look again
        return cards[-1] if cards else None

    card = wait_for(browser, pending, "a call waiting on the page")
    assert "rev_add" in card.text and "sha256:" in card.text, card.text
    if words:
        card.find_element(By.TAG_NAME, "input").send_keys(words)
    if arguments is not None:
        box = card.find_element(By.TAG_NAME, "textarea")
        box.clear()
        box.send_keys(arguments)
    shot(browser, f"review-{label.lower()}")
    card.find_element(By.XPATH, f".//button[text()='{label}']").click()


@contextmanager
def reviewed_on_page(box, browser):
    """`warden serve --http --console` with a reviewed `rev_add`, the browser on its console;
    yields the MCP URL and token."""
    box.policy("reviewed.toml", "trivial", "[review]\nrequired = true", top='prefix = "rev_"')
    with http_server(box, "--console") as (url, token):
        found = re.search(r"warden console: (\S+)", box.stderr.read_text())
        assert found, box.stderr.read_text()
        browser.get(found.group(1))
        yield url, token


async def decided_on_page(s, browser, arguments: dict, *decision):
    """The answer to `rev_add(arguments)` once the page decided it (`decide_on_page`'s
    arguments)."""
    answers = []
    async with anyio.create_task_group() as tasks:

        async def call():
            answers.append(await s.call_tool("rev_add", arguments))

        tasks.start_soon(call)
        await anyio.to_thread.run_sync(decide_on_page, browser, *decision)
    return answers[0]


async def test_a_call_waiting_for_review_is_approved_or_rejected_with_a_click(box, browser):
    with reviewed_on_page(box, browser) as (url, token):
        async with connect(url, token) as s:
            approved = await decided_on_page(s, browser, {"a": 2, "b": 3}, "Approve")
            assert approved.isError is False, approved.content[0].text
            assert approved.content[0].text == "5"

            rejected = await decided_on_page(s, browser, {"a": 1, "b": 1}, "Reject", "not this one")
            assert rejected.isError is True
            assert rejected.meta["warden/error"]["kind"] == "rejected"
            assert "not this one" in rejected.content[0].text
        log = box.call_log()
        assert '"reviewer":"console"' in log.replace(" ", ""), log


async def test_a_call_waiting_for_review_is_edited_or_answered_for_at_the_page(box, browser):
    from selenium.webdriver.common.by import By

    with reviewed_on_page(box, browser) as (url, token):
        async with connect(url, token) as s:
            edited = await decided_on_page(
                s, browser, {"a": 2, "b": 3}, "Edit", "", '{"a": 40, "b": 2}'
            )
            assert edited.isError is False, edited.content[0].text
            assert edited.content[0].text == "42", "ran with the person's arguments"

            # `add` promises an integer: a person's words go out as an error result (which
            # clients do not check against the output schema), the text as written.
            answered = await decided_on_page(s, browser, {"a": 1, "b": 1}, "Respond", "later, please")
            assert answered.isError is True, answered.content[0].text
            assert answered.content[0].text == "later, please"
            assert answered.meta["warden/error"]["kind"] == "rejected"

            # An edit the tool's schema refuses is the model's to fix, not a crash.
            wrong = await decided_on_page(s, browser, {"a": 1, "b": 1}, "Edit", "", '{"a": "x"}')
            assert wrong.isError is True, wrong.content[0].text

            # Arguments that are no JSON object never leave the page: the call still waits.
            async with anyio.create_task_group() as tasks:
                answers = []

                async def call():
                    answers.append(await s.call_tool("rev_add", {"a": 3, "b": 4}))

                tasks.start_soon(call)

                def not_json_then_approve():
                    decide_on_page(browser, "Edit", "", "[1, 2]")
                    said = wait_for(
                        browser,
                        lambda d: d.find_element(By.CSS_SELECTOR, "#pending .error").text,
                        "the page saying why",
                    )
                    assert "JSON object" in said, said
                    decide_on_page(browser, "Approve")

                await anyio.to_thread.run_sync(not_json_then_approve)
            assert answers[0].content[0].text == "7"
        log = box.call_log()
        decisions = [line for line in log.splitlines() if '"decision"' in line]
        assert any('"edit"' in line for line in decisions), decisions
        assert any('"respond"' in line for line in decisions), decisions


def test_a_decision_from_elsewhere_or_for_another_digest_is_refused(box):
    import json as _json

    box.policy("reviewed.toml", "trivial", "[review]\nrequired = true", top='prefix = "rev_"')
    with http_server(box, "--console") as _:
        console_url = re.search(r"warden console: (\S+)", box.stderr.read_text()).group(1)
        base = console_url.split("?")[0]
        # The cookie, as a browser would hold it after the exchange.
        try:
            urllib.request.build_opener(NoRedirect).open(console_url)
        except urllib.error.HTTPError as r:
            cookie = r.headers["Set-Cookie"].split(";")[0]
        origin = base.rstrip("/")

        def post(headers):
            body = _json.dumps({"id": 1, "digest": "sha256:00", "decision": "approve"}).encode()
            request = urllib.request.Request(
                base + "api/decide", data=body, method="POST", headers=headers
            )
            try:
                with urllib.request.urlopen(request) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code

        json_type = {"Content-Type": "application/json"}
        assert post({**json_type, "Origin": origin}) == 401, "no cookie"
        assert post({**json_type, "Cookie": cookie}) == 403, "no Origin"
        assert post({**json_type, "Cookie": cookie, "Origin": "http://evil.example"}) == 403
        assert post({"Cookie": cookie, "Origin": origin, "Content-Type": "text/plain"}) == 415
        # From the page itself, for a call that is not waiting: nothing to decide.
        assert post({**json_type, "Cookie": cookie, "Origin": origin}) == 404
