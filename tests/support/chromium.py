"""Debian's headless Chromium through selenium and chromium-driver, for the browser tests.

One place for the flags: ``--disable-background-networking`` and friends keep Chromium from
calling out (the test machines' network is closed, and a refused connection per start slows it
down); a fresh profile per test. A test that cannot run says what is missing and is skipped."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1100,700",
    "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
)


@contextmanager
def chromium(*missing: str) -> Iterator[Any]:
    """A selenium Chrome driver on Debian's chromium; skips the test, naming what is missing
    (``missing`` adds what the caller found absent, e.g. an npm bundle)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    browser, driver_path = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
    absent = [*missing, *(["Debian's chromium"] if browser is None else []),
              *(["Debian's chromium-driver"] if driver_path is None else [])]
    if absent:
        pytest.skip("missing: " + ", ".join(absent) + " (scripts/test installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()
