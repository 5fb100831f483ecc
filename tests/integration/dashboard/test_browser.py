"""The dashboard in a real browser: headless Chromium (Debian's chromium + chromium-driver)
driven by selenium against the app served by uvicorn on a loopback port.

Signs in, sees the overview, filters the dead jobs, requeues one by clicking and confirming,
watches it succeed after a worker runs it, sees an XSS payload render as text, and is refused
without the token. A screenshot of each page stays in the test's temporary folder (and in
``$TOCKWORK_DASHBOARD_SCREENSHOTS`` when set: docs/dashboard-overview.png comes from there).
Skipped, with the reason, when Chromium or its driver is not installed (``.ci/run`` installs
them).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import uvicorn

import jobs
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


@pytest.fixture
def served(db_url: str) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(db_url, token=TOKEN)
    server = _Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert server.ready.wait(30), "the dashboard did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(30)
    sock.close()


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
    """Click a button that submits a form and wait until the browser has left the page (the old
    document is gone), so the next lookup reads the new page, not the one being replaced."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.ID, button).click()

    def left(_: Any) -> bool:
        try:
            page.is_enabled()
        except WebDriverException:  # stale, or "does not belong to the document"
            return True
        return False

    WebDriverWait(driver, 30).until(left)
