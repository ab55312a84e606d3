"""The dashboard in a real headless Chromium (selenium + chromium-driver, installed by scripts/test)."""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stompmq.server import ServerSettings
from stompmq.server.auth import Permission, User, Users, hash_password

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.chromium import chromium
from ..support.stompclient import Client
from ..support.stores import TEST_LEASE, make_store_factory
from ..support.waiting import send_all, wait_until
from .test_http import Api
from .test_stream_groups import group
from .test_streams import publish

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

pytestmark = pytest.mark.browser

@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver


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
    browser.find_element(By.ID, "purge").click()
    wait.until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: "Ready\n0" in d.execute_script("return document.getElementById('queue-detail').innerText"))
    assert browser.get_log("browser") == []  # no script errors, nothing fetched from outside failed


SCREENSHOT = Path(__file__).parents[2] / "docs" / "dashboard.png"


def _put(url: str, body: dict[str, Any] | None = None) -> None:
    request = urllib.request.Request(url, data=json.dumps(body or {}).encode(), method="PUT",
                                     headers={"content-type": "application/json"})
    urllib.request.urlopen(request, timeout=10).close()


def _text(driver: webdriver.Chrome, element_id: str) -> str:
    return str(driver.execute_script(f"return document.getElementById('{element_id}').innerText"))


def test_dashboard_vhosts_consumers_peek_and_connections(
    make_memory_broker: Callable[..., BrokerThread], browser: webdriver.Chrome
) -> None:
    http_port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=http_port, store_shown="memory"))
    base = f"http://127.0.0.1:{http_port}"
    _put(base + "/api/vhosts/staging")
    send_all(broker.port, "/queue/orders", ["in the default vhost"])
    wait = WebDriverWait(browser, 10)
    with Client(broker.port, host="staging") as staging, Client(broker.port, host="staging") as consumer:
        for body in ("first order", "second order"):
            staging.send_to("/queue/invoices", body)
        consumer.subscribe("/queue/busy", ack="client-individual", prefetch="7", selector="kind = 'urgent'")

        browser.get(base + "/#overview")
        wait.until(lambda d: "Uptime" in _text(d, "overview"))
        assert "Memory" in _text(browser, "node") and "Alarms\nnone" in _text(browser, "node")
        assert re.search(r"Uptime\n\d+ s", _text(browser, "overview"))  # a duration, not "1.2"
        assert "Broker\nsingle broker" in _text(browser, "overview")  # memory: no cluster panel
        assert not browser.find_element(By.ID, "cluster-panel").is_displayed()

        browser.get(base + "/#queues")
        wait.until(lambda d: "orders" in _text(d, "queues"))
        assert "invoices" not in _text(browser, "queues")  # another vhost's queue
        Select(browser.find_element(By.ID, "vhost")).select_by_value("staging")
        wait.until(lambda d: "invoices" in _text(d, "queues") and "orders" not in _text(d, "queues"))

        browser.get(base + "/#queue/busy")  # the selected vhost stays: the queue of staging
        wait.until(lambda d: "7" in _text(d, "consumers"))
        assert "kind = 'urgent'" in _text(browser, "consumers")  # each consumer's selector
        browser.get(base + "/#queue/invoices")
        wait.until(lambda d: d.find_element(By.ID, "queue-name").text == "invoices")
        browser.find_element(By.ID, "peek").click()
        wait.until(lambda d: "second order" in _text(d, "messages"))
        assert _text(browser, "messages").index("first order") < _text(browser, "messages").index("second order")

        browser.find_element(By.ID, "purge").click()
        wait.until(lambda d: d.switch_to.alert).dismiss()  # asked, declined: nothing purged
        wait.until(lambda d: "Ready\n2" in _text(d, "queue-detail"))
        browser.find_element(By.ID, "purge").click()
        wait.until(lambda d: d.switch_to.alert).accept()
        wait.until(lambda d: "Ready\n0" in _text(d, "queue-detail"))

        wait.until(lambda d: d.execute_script(
            "return document.querySelectorAll('#queue-chart canvas').length") > 0)  # uPlot drew it

        browser.get(base + "/#connections")
        wait.until(lambda d: "staging" in _text(d, "connections"))
        # A sample is taken every 5 s: once one counted the publishes, a page opened now charts it.
        wait_until(lambda: any(p[1] for p in _get(base, "/api/history")["points"]), "a sampled point", 15)
        browser.set_window_size(1400, 900)
        browser.get(base + "/#overview")
        wait.until(lambda d: "Disk free" in _text(d, "node"))
        # The chart of every queue (uPlot): a canvas, two axes, a legend of the series with values
        # (its tooltip), and the points sampled before the page was loaded.
        wait.until(lambda d: "publish" in _text(d, "total-chart"))
        assert browser.execute_script("return document.querySelectorAll('#total-chart canvas').length") == 1
        assert browser.execute_script("return document.querySelectorAll('#total-chart .u-axis').length") == 2
        assert "ack" in _text(browser, "total-chart") and "deliver" in _text(browser, "total-chart")
        assert browser.execute_script("return Math.max(...state.charts['total-chart'].plot.data[1])") > 0
        wait.until(lambda d: d.execute_script("return state.charts['total-chart'].plot.width") > 1000)  # full width
        # The range picker (RabbitMQ's chart ranges): the x scale spans what was picked.
        span = "const x = state.charts['total-chart'].plot.scales.x; return Math.round(x.max - x.min);"
        assert browser.execute_script(span) == 3600
        Select(browser.find_element(By.ID, "range")).select_by_value("600")
        wait.until(lambda d: d.execute_script(span) == 600)
        assert browser.execute_script("return Math.max(...state.charts['total-chart'].plot.data[1])") > 0
        Select(browser.find_element(By.ID, "range")).select_by_value("3600")
        wait.until(lambda d: d.execute_script(span) == 3600)
        browser.execute_script("window.scrollTo(0, 0)")
        browser.save_screenshot(str(SCREENSHOT))

        connection_id = next(row["id"] for row in _connections(base) if row["subscriptions"])
        browser.get(f"{base}/#connection/{connection_id}")
        wait.until(lambda d: "/queue/busy" in _text(d, "subscriptions"))
        assert "Frames in" in _text(browser, "connection-detail")
        browser.find_element(By.ID, "close-connection").click()
        wait.until(lambda d: d.switch_to.alert).accept()
        wait.until(lambda d: d.execute_script("return location.hash") == "#connections")
        assert consumer.next().command == "ERROR"  # closed by an administrator
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def _get(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=10) as response:
        return json.loads(response.read())


def _connections(base: str) -> list[dict[str, Any]]:
    return list(_get(base, "/api/connections")["items"])


def _rows(driver: webdriver.Chrome, selector: str) -> list[list[str]]:
    """The cells of a table's rows, read by one script (the page replaces them on every refresh)."""
    return list(driver.execute_script(
        f"return [...document.querySelectorAll('{selector} tr')].map(tr => [...tr.cells].map(td => td.textContent))"))


@pytest.mark.postgres
def test_dashboard_cluster_panel_lists_the_brokers_and_their_totals(browser: webdriver.Chrome, tmp_path: Path) -> None:
    store = make_store_factory("postgres", tmp_path)
    http_port = free_port()
    with BrokerThread(store, settings=ServerSettings(port=0, http_port=http_port)).start() as a, \
            BrokerThread(store).start() as b:
        send_all(a.port, "/queue/clustered", ["x"] * 3)
        send_all(b.port, "/queue/clustered", ["y"] * 2)
        browser.get(f"http://127.0.0.1:{http_port}/#overview")
        wait = WebDriverWait(browser, 3 * TEST_LEASE + 10)  # the counters come with each lease renewal
        wait.until(lambda d: d.find_element(By.ID, "cluster-panel").is_displayed())
        # Totals row: published is column 8 (after broker, lease, renewal, epoch, claimed, unacked, version).
        wait.until(lambda d: [row[7] for row in _rows(d, "#cluster tfoot")] == ["5"])
        assert a.broker is not None and b.broker is not None
        this, other = a.broker.store.node_id, b.broker.store.node_id
        brokers = _rows(browser, "#cluster tbody")
        assert sorted(row[0] for row in brokers) == sorted([this + " (this)", other])
        assert sorted(row[7] for row in brokers) == ["2", "3"]
        assert all(re.fullmatch(r"\d+ s", row[1]) and row[2].endswith(" ago") for row in brokers)
        assert "Broker\n" + this in _text(browser, "overview")
        assert browser.get_log("browser") == []


def test_dashboard_gets_and_moves_messages_after_asking(
    make_memory_broker: Callable[..., BrokerThread], browser: webdriver.Chrome
) -> None:
    http_port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=http_port))
    base = f"http://127.0.0.1:{http_port}"
    send_all(broker.port, "/queue/DLQ.orders", ["one", "two", "three"])
    wait = WebDriverWait(browser, 10)
    browser.get(base + "/#queue/DLQ.orders")
    wait.until(lambda d: "Ready\n3" in _text(d, "queue-detail"))
    count = browser.find_element(By.ID, "peek-count")
    count.clear()
    count.send_keys("1")
    assert browser.find_element(By.ID, "get").text == "Get 1"
    browser.find_element(By.ID, "get").click()
    wait.until(lambda d: d.switch_to.alert).dismiss()  # asked, declined: nothing taken
    wait.until(lambda d: "Ready\n3" in _text(d, "queue-detail"))
    browser.find_element(By.ID, "get").click()
    wait.until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: "one" in _text(d, "messages") and "Ready\n2" in _text(d, "queue-detail"))
    browser.find_element(By.ID, "move").click()
    prompt = wait.until(lambda d: d.switch_to.alert)
    assert "to which queue" in prompt.text
    prompt.accept()  # the suggestion: the queue the dead letters came from
    wait.until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: "moved 2 to orders" in _text(d, "message-note"))
    wait.until(lambda d: "Ready\n0" in _text(d, "queue-detail"))
    assert [m["body"] for m in _get(base, "/api/queues/%2F/orders/messages")["items"]] == ["two", "three"]
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_dashboard_lists_schedules_and_cancels_one_after_asking(
    make_memory_broker: Callable[..., BrokerThread], browser: webdriver.Chrome
) -> None:
    http_port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=http_port))
    base = f"http://127.0.0.1:{http_port}"
    with Client(broker.port) as producer:
        producer.send_to("/queue/nightly", "n", headers={"AMQ_SCHEDULED_CRON": "0 2 * * *"})
        producer.send_to("/queue/ticks", "t", headers={"AMQ_SCHEDULED_DELAY": "600000",
                                                       "AMQ_SCHEDULED_PERIOD": "60000", "AMQ_SCHEDULED_REPEAT": "2"})
    wait = WebDriverWait(browser, 10)
    browser.get(base + "/#schedules")
    wait.until(lambda d: "nightly" in _text(d, "schedules") and "ticks" in _text(d, "schedules"))
    text = _text(browser, "schedules")
    assert "0 2 * * *" in text and "no end" in text and "1 min" in text and "02:00:00" in text
    row = next(tr for tr in browser.find_elements(By.CSS_SELECTOR, "#schedules tbody tr") if "ticks" in tr.text)
    row.find_element(By.TAG_NAME, "button").click()
    wait.until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: "ticks" not in _text(d, "schedules"))
    assert [s["queue"] for s in _get(base, "/api/schedules/%2F")["items"]] == ["nightly"]
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_dashboard_lists_streams_with_each_groups_lag(
    make_memory_broker: Callable[..., BrokerThread], browser: webdriver.Chrome
) -> None:
    http_port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=http_port, store_shown="memory"))
    with Client(broker.port) as c:
        publish(c, "events", 10)
        group(c, "events", "billing", offset="4")  # 6 entries behind
    base = f"http://127.0.0.1:{http_port}"
    _put(base + "/api/policies/%2F/retain", {"pattern": "^events$", "apply-to": "streams",
                                            "definition": {"max-age": 3600}})
    browser.get(base + "/#streams")
    WebDriverWait(browser, 10).until(lambda d: "events" in _text(d, "streams"))
    [row] = _rows(browser, "#streams tbody")
    assert row[:3] == ["events", "0", "10"]
    assert row[5] == "max-age=3600 (policy retain)"
    assert re.fullmatch(r"billing: 6 \(\d+ s\)", row[6]), row[6]
    assert browser.get_log("browser") == []


def test_dashboard_declares_a_queue_an_exchange_and_a_user_after_asking(
    make_memory_broker: Callable[..., BrokerThread], browser: webdriver.Chrome, tmp_path: Path
) -> None:
    users_file = tmp_path / "users.toml"
    Users({"root": User("root", hash_password("pw-root"), ["administrator"], {"/": Permission()})}).save(users_file)
    http_port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=http_port, users_file=str(users_file)))
    base = f"http://127.0.0.1:{http_port}"
    token = "Basic " + base64.b64encode(b"root:pw-root").decode()
    browser.execute_cdp_cmd("Network.enable", {})  # the page's requests carry root's credentials
    browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"authorization": token}})

    def as_root(path: str) -> int:
        request = urllib.request.Request(base + path, headers={"authorization": token})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as e:
            return e.code

    wait = WebDriverWait(browser, 10)
    browser.get(base + "/#queues")
    browser.find_element(By.ID, "declare-queue-name").send_keys("declared")
    browser.find_element(By.ID, "declare-queue-arguments").send_keys("message-ttl=60000")
    browser.find_element(By.CSS_SELECTOR, "#declare-queue-form button").click()
    question = wait.until(lambda d: d.switch_to.alert)
    assert "Declare queue declared in vhost / (message-ttl=60000)" in question.text
    question.dismiss()  # asked, declined: nothing declared
    assert as_root("/api/queues/%2F/declared") == 404
    browser.find_element(By.CSS_SELECTOR, "#declare-queue-form button").click()
    wait.until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: "declared" in _text(d, "queues"))
    assert as_root("/api/queues/%2F/declared") == 200

    browser.get(base + "/#queue/declared")
    wait.until(lambda d: d.find_element(By.ID, "queue-name").text == "declared")
    browser.find_element(By.ID, "delete").click()
    wait.until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: d.execute_script("return location.hash") == "#queues")
    wait_until(lambda: as_root("/api/queues/%2F/declared") == 404, "the queue deleted")

    browser.get(base + "/#exchanges")
    browser.find_element(By.ID, "declare-exchange-name").send_keys("prices")
    Select(browser.find_element(By.ID, "declare-exchange-type")).select_by_value("topic")
    browser.find_element(By.CSS_SELECTOR, "#declare-exchange-form button").click()
    wait.until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: ["prices", "topic"] in [row[:2] for row in _rows(d, "#exchanges tbody")])

    browser.get(base + "/#users")
    wait.until(lambda d: "root" in _text(d, "users"))
    browser.find_element(By.ID, "add-user-name").send_keys("dana")
    browser.find_element(By.ID, "add-user-password").send_keys("pw-dana")
    browser.find_element(By.ID, "add-user-monitoring").click()
    browser.find_element(By.ID, "add-user-grant").click()
    browser.find_element(By.CSS_SELECTOR, "#add-user-form button").click()
    question = wait.until(lambda d: d.switch_to.alert)
    assert "Add user dana (tags monitoring, every permission on vhost /)" in question.text
    question.accept()
    wait.until(lambda d: ["dana", "monitoring", "/: .* / .* / .*"] in _rows(d, "#users tbody"))
    with Client(broker.port, login="dana", passcode="pw-dana") as dana:  # in force at once
        dana.send_to("/queue/from-dana", "hello")
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_dashboard_says_why_it_has_no_users_without_a_users_file(
    make_memory_broker: Callable[..., BrokerThread], browser: webdriver.Chrome
) -> None:
    http_port = free_port()
    make_memory_broker(settings=ServerSettings(port=0, http_port=http_port))
    browser.get(f"http://127.0.0.1:{http_port}/#users")
    wait = WebDriverWait(browser, 10)
    wait.until(lambda d: "without a users file" in _text(d, "users-note"))
    assert not browser.find_element(By.ID, "add-user-form").is_displayed()


#: A policy name the page must show as text: as markup it would add an image whose error handler runs.
HOSTILE = "<img src=x onerror=window.injected=1>"


def test_dashboard_shows_a_queues_settings_with_their_sources_and_the_policies(
    make_memory_broker: Callable[..., BrokerThread], browser: webdriver.Chrome
) -> None:
    http_port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=http_port))
    base, api = f"http://127.0.0.1:{http_port}", Api(http_port)
    assert api.call("PUT", "/api/queues/%2F/orders.eu", {"arguments": {"max-length": 1000}})[0] == 201
    policy = {"pattern": "^orders\\.", "apply-to": "queues", "priority": 1,
              "definition": {"message-ttl": 60000, "max-length": 5}}  # the declared max-length wins
    assert api.call("PUT", "/api/policies/%2F/" + urllib.parse.quote(HOSTILE, safe=""), policy)[0] == 201
    caps = {"pattern": "\\.eu$", "definition": {"delivery-limit": 3}}
    assert api.call("PUT", "/api/operator-policies/%2F/caps", caps)[0] == 201
    send_all(broker.port, "/queue/plain", ["x"])  # a queue of no settings at all
    wait = WebDriverWait(browser, 10)

    browser.get(base + "/#queue/orders.eu")
    expected = [["delivery-limit", "3", "operator policy caps"], ["max-length", "1000", "declared"],
                ["message-ttl", "60000", "policy " + HOSTILE]]
    wait.until(lambda d: _rows(d, "#settings tbody") == expected)
    assert not browser.find_element(By.ID, "settings-empty").is_displayed()
    link = browser.find_element(By.LINK_TEXT, HOSTILE)  # the policy's name, as text, leads to the policies
    link.click()
    wait.until(lambda d: _rows(d, "#policies tbody") == [[HOSTILE, "^orders\\.", "queues", "1",
                                                          "max-length=5, message-ttl=60000"]])
    assert _rows(browser, "#operator-policies tbody") == [["caps", "\\.eu$", "all", "0", "delivery-limit=3"]]

    browser.get(base + "/#queue/plain")
    wait.until(lambda d: d.find_element(By.ID, "settings-empty").is_displayed())
    assert _rows(browser, "#settings tbody") == []
    assert browser.execute_script("return document.getElementsByTagName('img').length") == 0
    assert browser.execute_script("return window.injected") is None  # no handler ran
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
