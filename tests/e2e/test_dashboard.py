"""The dashboard in a real headless Chromium (selenium + chromium-driver, installed by scripts/test)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stompmq.server import ServerSettings

from ..support.broker_thread import BrokerThread
from ..support.broker_process import free_port
from ..support.waiting import send_all

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.browser

@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    driver_path = shutil.which("chromedriver")
    if driver_path is None or not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("needs Debian's chromium and chromium-driver (scripts/test installs them)")
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,700"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def test_dashboard_shows_a_queue_and_its_counts_change(
    make_memory_broker: Callable[..., BrokerThread], browser: webdriver.Chrome, tmp_path: Path
) -> None:
    http_port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=http_port, store_shown="memory"))
    send_all(broker.port, "/queue/dash-test", ["x"] * 3)
    browser.get(f"http://127.0.0.1:{http_port}/#queues")
    wait = WebDriverWait(browser, 10)

    def ready_count(driver: webdriver.Chrome) -> str | bool:
        # One script reads the table at once: the page replaces its rows on every refresh.
        rows = driver.execute_script(
            "return [...document.querySelectorAll('#queues tbody tr')]"
            ".map(tr => [...tr.cells].map(td => td.textContent))"
        )
        return next((cells[1] for cells in rows if cells[0] == "dash-test"), False)

    assert wait.until(ready_count) == "3"
    send_all(broker.port, "/queue/dash-test", ["x"] * 2)
    wait.until(lambda d: ready_count(d) == "5")
    browser.save_screenshot(str(tmp_path / "dashboard.png"))  # docs/dashboard.png is one of these

    browser.find_element(By.LINK_TEXT, "dash-test").click()
    wait.until(lambda d: d.find_element(By.ID, "queue-name").text == "dash-test")
    wait.until(lambda d: "Ready\n5" in d.execute_script("return document.getElementById('queue-detail').innerText"))
    assert browser.get_log("browser") == []  # no script errors, nothing fetched from outside failed
