"""The dashboard in a real browser: headless Chromium (Debian's chromium + chromium-driver)
driven by selenium against the app served by uvicorn on a loopback port.

Signs in, sees the overview, filters the dead jobs, requeues one by clicking and confirming,
watches it succeed after a worker runs it, sees an XSS payload render as text, and is refused
without the token. Then every page is loaded and checked (no JavaScript error, not an error
page, laid out: see ``_check_page``), and the overview's live refresh is watched changing a
count without a reload. A screenshot of each page stays in the test's temporary folder (and in
``$TOCKWORK_DASHBOARD_SCREENSHOTS`` when set: docs/dashboard-overview.png is ``overview.png``).
Skipped, with the reason, when Chromium or its driver is not installed (``.ci/run`` installs
them).
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import threading
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import uvicorn

import jobs
import scheduler
from jobs import processes
from jobs.processes import ProcessFacts
from scheduler.dashboard import create_app
from tests.integration.dashboard.conftest import TOKEN, dead_jobs, succeed

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
XSS = "<script>alert('xss')</script>"


class _Server(uvicorn.Server):
    """uvicorn with an event set once it listens (the test waits on it, never sleeps)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


@contextmanager
def _serving(db_url: str, **options: Any) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(db_url, token=TOKEN, **options)
    server = _Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert server.ready.wait(30), "the dashboard did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@pytest.fixture
def served(db_url: str) -> Iterator[str]:
    with _serving(db_url) as url:
        yield url


@pytest.fixture
def served_live(db_url: str) -> Iterator[str]:
    """Live regions refreshed every 0.2 s (the test waits on the change, not on time)."""
    with _serving(db_url, refresh=0.2) as url:
        yield url


@pytest.fixture
def driver() -> Iterator[Any]:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(DRIVER, os.X_OK)):
        reason = f"Chromium ({CHROMIUM}) or chromedriver ({DRIVER}) is not installed"
        print(f"skipping the browser test: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,900"):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, read below
    browser = webdriver.Chrome(options=options, service=Service(DRIVER))
    browser.implicitly_wait(5)  # element lookups wait for the page (no sleeps in the test)
    try:
        yield browser
    finally:
        browser.quit()


def _shot(browser: Any, folder: Path, name: str) -> None:
    path = folder / f"{name}.png"
    browser.save_screenshot(str(path))
    assert path.stat().st_size > 1000
    extra = os.environ.get("TOCKWORK_DASHBOARD_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(extra) / path.name)


def test_the_dashboard_in_a_real_browser(
    db_url: str, served: str, driver: Any, tmp_path: Path
) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    plain = dead_jobs(db_url, 2, queue="mail", payload={"to": "a@example.com"})
    [xss] = dead_jobs(db_url, 1, queue="mail", payload={"note": XSS, "error": XSS})
    dead_jobs(db_url, 1, queue="other")
    with psycopg.connect(db_url) as conn, conn.transaction():
        for i in range(5):
            jobs.enqueue(conn, "send", {"i": i}, queue="push")

    # Without the token: the API refuses, a page asks to sign in.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{served}/api/queues")
    assert refused.value.code == 401
    refused.value.close()
    driver.get(f"{served}/")
    assert "/login" in driver.current_url
    _shot(driver, tmp_path, "login")

    # Sign in: the overview.
    driver.find_element(By.ID, "name").clear()
    driver.find_element(By.ID, "name").send_keys("alice")
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    _submit(driver, "sign-in")
    queues = driver.find_element(By.ID, "queues")
    assert "mail" in queues.text and "push" in queues.text
    _shot(driver, tmp_path, "dashboard-overview")

    # Filter the dead jobs of one queue.
    driver.get(f"{served}/dead")
    driver.find_element(By.ID, "f-queue").send_keys("mail")
    _submit(driver, "filter")
    assert driver.find_element(By.ID, "dead-count").text == "3 dead"
    _shot(driver, tmp_path, "dead-letters")

    # Requeue one by clicking and confirming.
    driver.find_element(By.ID, f"select-{plain[0]}").click()
    _submit(driver, "requeue-selected")
    assert driver.find_element(By.ID, "confirm-text").text == "This will requeue 1 dead job."
    _shot(driver, tmp_path, "confirm")
    _submit(driver, "confirm")
    assert driver.find_element(By.ID, "done").text == "requeue: 1 job"
    assert "alice" in driver.find_element(By.ID, "audit").text

    # A worker runs it: the job page shows it succeeded.
    jobs.Worker(db_url, {"send": succeed}, {"mail": 1}, listen=False).run_until_idle()
    driver.get(f"{served}/jobs/{plain[0]}")
    assert driver.find_element(By.ID, "job-status").text == "succeeded"
    _shot(driver, tmp_path, "job")

    # An XSS payload renders as text, and no script ran.
    driver.get(f"{served}/jobs/{xss}")
    assert XSS in driver.find_element(By.ID, "payload").text
    assert XSS in driver.find_element(By.ID, "last-error").text
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018 (reading it is the check)
    _shot(driver, tmp_path, "xss-as-text")

    for page in ("schedules", "lateness", "outbox", "preview"):
        driver.get(f"{served}/{page}")
        assert driver.find_element(By.TAG_NAME, "h1").text
        _shot(driver, tmp_path, page)
    print(f"screenshots in {tmp_path}")


def _submit(driver: Any, button: str) -> None:
    """Click a button that submits a form and wait until the browser has left the page."""
    from selenium.webdriver.common.by import By

    _leave(driver, lambda: driver.find_element(By.ID, button).click())


def _leave(driver: Any, act: Callable[[], object]) -> None:
    """Do ``act`` (a click, an Enter in a form) and wait until the browser has left the page
    (the old document is gone), so the next lookup reads the new page, not the one being
    replaced."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    act()

    def left(_: Any) -> bool:
        try:
            page.is_enabled()
        except WebDriverException:  # stale, or "does not belong to the document"
            return True
        return False

    WebDriverWait(driver, 30).until(left)


# -- every page, screenshot-tested -----------------------------------------------------------------


def _sign_in(driver: Any, served: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{served}/login")
    driver.find_element(By.ID, "name").clear()
    driver.find_element(By.ID, "name").send_keys("alice")
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    _submit(driver, "sign-in")


def _png_detail(path: Path) -> int:
    """How many distinct byte values the decompressed image rows hold: a blank or one-colour page
    holds a handful, a laid-out page hundreds (a PNG read with the standard library)."""
    data, idat, at = path.read_bytes(), b"", 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        if data[at + 4 : at + 8] == b"IDAT":
            idat += data[at + 8 : at + 8 + length]
        at += 12 + length
    return len(set(zlib.decompress(idat)))


def _check_page(driver: Any, folder: Path, name: str) -> None:
    """The page loaded without a JavaScript error (the console's SEVERE entries, a failed
    resource load included), is not an error page, and is laid out (a heading, a main area of
    some height with content, a screenshot with detail); its screenshot is kept."""
    from selenium.webdriver.common.by import By

    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], (name, errors)
    title = driver.find_element(By.TAG_NAME, "h1").text
    assert title and not title.startswith("Error") and "Sign in" not in title, (name, title)
    layout = driver.execute_script(
        "const m = document.querySelector('main'); const r = m.getBoundingClientRect();"
        "return [r.height, r.width, m.querySelectorAll('*').length, m.innerText.trim().length];"
    )
    height, width, elements, text = layout
    assert height > 80 and width > 600 and elements > 5 and text > 40, (name, layout)
    _shot(driver, folder, name)
    assert _png_detail(folder / f"{name}.png") > 40, name


def test_every_page_in_a_real_browser_loads_without_error_and_is_laid_out(
    db_url: str, served: str, driver: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    [dead] = dead_jobs(db_url, 1, queue="mail", payload={"to": "a@example.com"})
    with psycopg.connect(db_url) as conn, conn.transaction():
        jobs.enqueue(conn, "send", {}, queue="push", idempotency_key="order-1")
        s = scheduler.create_schedule(
            conn, job_type="reminder", rule="daily@02:30", zone="Europe/Berlin", subject="u-1"
        )
    with psycopg.connect(db_url, autocommit=True) as conn:
        processes.beat(conn, ProcessFacts(kind="worker", name="w1", queues={"push": 4}))
    _sign_in(driver, served)
    pages = {
        "overview": "/",
        "jobs": "/jobs",
        "job": f"/jobs/{dead}",
        "dead": "/dead",
        "schedules": "/schedules",
        "schedule": f"/schedules/{s.id}?after=2027-03-20T00:00Z&count=20",
        "preview": "/preview?rule=daily@02:30&zone=America/New_York&after=2027-03-13T00:00Z",
        "lateness": "/lateness?window=1h",
        "outbox": "/outbox",
        "processes": "/processes",
        "search": "/search?q=nothing-matches-this",
    }
    for name, path in pages.items():
        driver.get(f"{served}{path}")
        _check_page(driver, tmp_path, name)
    # The forms that lead to other pages: a search that finds one job, the confirmation.
    driver.get(f"{served}/processes")
    # Enter submits the search: wait for the page it leads to before reading the address.
    _leave(driver, lambda: driver.find_element(By.ID, "search").send_keys("order-1\n"))
    assert "idempotency_key=order-1" in driver.current_url
    _check_page(driver, tmp_path, "search-found")
    driver.get(f"{served}/dead")
    driver.find_element(By.ID, f"select-{dead}").click()
    _submit(driver, "requeue-selected")
    _check_page(driver, tmp_path, "confirm")
    # Times are shown in the schedule's zone there, with the UTC instant on hover.
    driver.get(f"{served}/schedules/{s.id}")
    shown = driver.find_element(By.CSS_SELECTOR, "#fields-live time")
    hover = shown.get_attribute("title")
    assert "UTC, in " in hover and "Europe/Berlin" in hover  # the next run is in the future
    assert not shown.text.endswith("Z") and "local" in shown.get_attribute("class")
    # The job page's own actions, by clicking: requeue the dead job.
    driver.get(f"{served}/jobs/{dead}")
    _submit(driver, "job-requeue")
    assert driver.find_element(By.ID, "job-status").text == "pending"
    _check_page(driver, tmp_path, "job-requeued")
    # The check fails on an error page, a JavaScript error and an empty layout.
    driver.get(f"{served}/jobs/999999")
    with pytest.raises(AssertionError):
        _check_page(driver, tmp_path, "missing-job")
    driver.get(f"{served}/processes")
    driver.execute_script("console.error('planted')")
    with pytest.raises(AssertionError, match="planted"):
        _check_page(driver, tmp_path, "js-error")
    driver.get(f"{served}/processes")
    driver.execute_script(
        "document.querySelector('main').replaceChildren(document.createElement('h1'));"
    )
    with pytest.raises(AssertionError):
        _check_page(driver, tmp_path, "empty")
    print(f"screenshots in {tmp_path}")


def test_the_overview_refreshes_a_count_without_a_reload(
    db_url: str, served_live: str, driver: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with psycopg.connect(db_url) as conn, conn.transaction():
        jobs.enqueue(conn, "send", {}, queue="live")
    _sign_in(driver, served_live)
    assert driver.find_element(By.CSS_SELECTOR, "#queue-live .ready").text == "1"
    driver.execute_script("window.notReloaded = true;")
    with psycopg.connect(db_url) as conn, conn.transaction():
        for _ in range(2):
            jobs.enqueue(conn, "send", {}, queue="live")

    def ready(_: Any) -> str | None:
        cells = driver.find_elements(By.CSS_SELECTOR, "#queue-live .ready")
        return cells[0].text if cells and cells[0].text == "3" else None

    assert WebDriverWait(driver, 30).until(ready) == "3"
    assert driver.execute_script("return window.notReloaded === true")  # the same document
    assert driver.execute_script("return window.tockworkLive.refreshes") >= 1
    assert driver.find_element(By.ID, "live-status").text.startswith("live: updated")
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
