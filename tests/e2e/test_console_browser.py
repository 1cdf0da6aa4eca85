"""The console in a real browser against a real `netmap up` server (WEB-1..6).

Headless Debian Chromium driven by Selenium through Debian's chromedriver, both
named explicitly (``/usr/bin/chromium``, ``/usr/bin/chromedriver``) with
``SE_AVOID_STATS=true``, so Selenium Manager never looks for or downloads a
driver and sends no statistics. Data reaches the server through the scanner
protocol (claim, upload with checksums); the runner publishes current assets.
On failure, a screenshot and the page source go to the test's tmp directory.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from tests.support.netmap_server import ADMIN_PASSWORD, netmap_server
from tests.support.scanner_protocol import observation, upload_body

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
XSS_NAME = '<img src=x onerror="window.__xss=1">'
XSS_BANNER = '<script>window.__xss=2</script><svg onload="window.__xss=3">'

selenium = pytest.importorskip("selenium")

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import (  # noqa: E402
    NoAlertPresentException,
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[webdriver.Chrome]:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip("Debian chromium and chromium-driver are not installed")
    monkeypatch.setenv("SE_AVOID_STATS", "true")
    options = Options()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(argument)
    service = Service(executable_path=CHROMEDRIVER, log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@contextmanager
def evidence_on_failure(driver: webdriver.Chrome, directory: Path) -> Iterator[None]:
    """Keep a screenshot and the HTML of the page the browser was on when the test failed."""
    try:
        yield
    except BaseException:
        stamp = time.strftime("%H%M%S")
        driver.save_screenshot(str(directory / f"failure-{stamp}.png"))
        (directory / f"failure-{stamp}.html").write_text(driver.page_source)
        raise


# While a click's navigation is under way, an element found on the old page goes stale
# between its look-up and its use: a wait tries again, as it does for a missing element.
_NOT_YET = (NoSuchElementException, StaleElementReferenceException)

# Chromium's driver does not always call that race "stale": when the old page's node is
# read just as the new document replaces it, it answers "unknown error: ... Node with
# given id does not belong to the document". That is the same race, so a wait treats it
# as stale; any other driver error still fails the test.
_SAME_RACE = "does not belong to the document"


def _through_navigation(look):
    try:
        return look()
    except WebDriverException as error:
        if isinstance(error, _NOT_YET) or _SAME_RACE not in (error.msg or ""):
            raise
        raise StaleElementReferenceException(error.msg) from error


def wait_for(driver, condition, seconds: float = 60):
    return WebDriverWait(driver, seconds, poll_frequency=0.2, ignored_exceptions=_NOT_YET).until(
        lambda d: _through_navigation(condition)
    )


def present(driver, by: str, selector: str, seconds: float = 30):
    """The element once it is there: a click on a submit button may return before the next
    page has loaded, so every look-up after a navigation waits for its element."""
    return WebDriverWait(driver, seconds, poll_frequency=0.2, ignored_exceptions=_NOT_YET).until(
        lambda d: _through_navigation(lambda: d.find_element(by, selector))
    )


def text_of(driver, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def sign_in(driver, url: str, username: str, password: str) -> None:
    driver.get(url + "/console/")
    assert "/console/sign-in" in driver.current_url
    driver.find_element(By.ID, "username").send_keys(username)
    driver.find_element(By.ID, "password").send_keys(password)
    driver.find_element(By.ID, "sign-in").click()
    # The address changes when the next page starts to load: wait for it to be loaded too,
    # so the caller's look-ups see the console page, not a document still being built. The
    # path is compared, not the address's end: the sign-in page's own address ends with
    # ``?next=/console/``, and a wait satisfied by it let the caller's next navigation race
    # the sign-in's redirect (and lose to it).
    wait_for(
        driver,
        lambda: (
            urlsplit(driver.current_url).path.rstrip("/") == "/console"
            and driver.execute_script("return document.readyState") == "complete"
        ),
    )


def fill(driver, element_id: str, value: str) -> None:
    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(value)


def no_script_ran(driver) -> None:
    try:
        alert = driver.switch_to.alert
    except NoAlertPresentException:
        alert = None
    assert alert is None
    assert driver.execute_script("return window.__xss === undefined ? null : window.__xss") is None


def scanner_upload(url: str, token: str, observations: list[dict]) -> int:
    """Claim the next execution and upload ``observations`` as its one final batch."""
    headers = {"Authorization": f"Bearer {token}"}
    claimed = requests.post(url + "/api/scanner/claim", headers=headers, timeout=30)
    assert claimed.status_code == 200, claimed.text
    execution = claimed.json()["execution"]
    body = upload_body(execution["claim_token"], 0, observations, is_final=True)
    uploaded = requests.post(
        f"{url}/api/scanner/executions/{execution['id']}/uploads",
        json=body,
        headers=headers,
        timeout=60,
    )
    assert uploaded.status_code == 200, uploaded.text
    return execution["id"]


def test_sign_in_create_task_live_status_search_page_and_sign_out(database_url, tmp_path, browser):
    with (
        netmap_server(database_url, tmp_path / "server") as server,
        evidence_on_failure(browser, tmp_path),
    ):
        url = server.url
        sign_in(browser, url, "admin", ADMIN_PASSWORD)
        assert browser.find_element(By.ID, "tasks-running").is_displayed()

        # A bad target line is reported next to its line, and the input is kept.
        browser.get(url + "/console/tasks/new")
        fill(browser, "name", XSS_NAME)
        fill(browser, "targets", "127.0.0.0/26\nnot a host!\n")
        fill(browser, "ports", "22,443")
        browser.find_element(By.ID, "create-task").click()
        problem = present(browser, By.CSS_SELECTOR, '#targets-errors li[data-line="2"]')
        assert "not a host!" in problem.text
        assert "127.0.0.0/26" in browser.find_element(By.ID, "targets").get_attribute("value")

        fill(browser, "targets", "127.0.0.0/26\n")
        browser.find_element(By.ID, "create-task").click()
        assert present(browser, By.ID, "task-status").text == "queued"
        run_now = browser.find_element(By.ID, "run-now-button")
        assert not run_now.is_enabled() and "a run is active" in run_now.get_attribute("title")
        assert text_of(browser, "task-name") == XSS_NAME  # shown as text, never run
        no_script_ran(browser)

        # A marker only this page load carries: if the page reloaded, it is gone.
        browser.execute_script("window.__sameLoad = 'yes'")
        token = server.scanner_token("browser-scanner")
        observations = [
            observation(f"127.0.0.{i}", 22, service={"name": "ssh", "product": "OpenSSH"})
            for i in range(1, 61)
        ] + [
            observation(
                "127.0.0.62",
                443,
                hostname=XSS_NAME,
                service={"name": "https", "product": "nginx", "banner": XSS_BANNER},
            )
        ]
        scanner_upload(url, token, observations)
        wait_for(browser, lambda: text_of(browser, "task-status") == "succeeded")
        wait_for(browser, lambda: text_of(browser, "projection-status") == "published", 120)
        assert browser.execute_script("return window.__sameLoad") == "yes"
        assert text_of(browser, "endpoints") == "61"
        # The latest run's row, its summary and Run now followed the run, without a reload.
        wait_for(browser, run_now.is_enabled)
        assert not run_now.get_attribute("title")
        row = browser.find_element(By.CSS_SELECTOR, "#runs tr[data-run-id]")
        assert row.find_element(By.CSS_SELECTOR, '[data-field="status"]').text == "succeeded"
        assert row.find_element(By.CSS_SELECTOR, '[data-field="endpoints"]').text == "61"
        assert row.find_element(By.CSS_SELECTOR, '[data-field="finished_at"]').text.endswith("Z")
        assert not row.find_elements(By.CSS_SELECTOR, "form[data-run-cancel]")
        latest = browser.find_element(By.ID, "latest-run").text
        assert "succeeded" in latest and "61 endpoints" in latest, latest
        assert browser.execute_script("return window.__sameLoad") == "yes"

        # Search with filters, then page through everything.
        browser.get(url + "/console/assets")
        fill(browser, "f-service", "https")
        browser.find_element(By.ID, "search").click()
        wait_for(browser, lambda: "service=https" in browser.current_url)
        present(browser, By.ID, "endpoints-table")
        rows = browser.find_elements(By.CSS_SELECTOR, "#endpoints-table td.ip")
        assert [r.text for r in rows] == ["127.0.0.62"]
        banner = browser.find_element(By.CSS_SELECTOR, "#endpoints-table td.banner").text
        assert "<script>" in banner
        no_script_ran(browser)

        # The endpoint's history: once the runner has analysed the execution, it is open
        # and its first event is "new".
        browser.find_element(By.CSS_SELECTOR, "#endpoints-table a.history-link").click()
        wait_for(browser, lambda: "/console/assets/history" in browser.current_url)
        assert "127.0.0.62:443/tcp" in browser.find_element(By.TAG_NAME, "h1").text

        def analysed() -> bool:
            browser.refresh()
            kinds = browser.find_elements(By.CSS_SELECTOR, "#history-events td.kind-new")
            return text_of(browser, "history-status") == "open" and len(kinds) == 1

        wait_for(browser, analysed, 120)
        no_script_ran(browser)

        browser.get(url + "/console/assets")
        seen = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#endpoints-table td.ip")]
        assert len(seen) == 50
        browser.find_element(By.ID, "next-page").click()
        wait_for(browser, lambda: "cursor=" in browser.current_url)
        present(browser, By.ID, "endpoints-table")
        seen += [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#endpoints-table td.ip")]
        assert len(seen) == 61 and len(set(seen)) == 61
        assert not browser.find_elements(By.ID, "next-page")
        no_script_ran(browser)

        # The address header reverses the order (WEB-12); the next page keeps it.
        browser.get(url + "/console/assets")
        browser.find_element(By.ID, "sort-ip").click()
        wait_for(browser, lambda: "order=desc" in browser.current_url)
        active = browser.find_elements(By.CSS_SELECTOR, "#endpoints-table th[aria-sort]")
        assert [th.get_attribute("aria-sort") for th in active] == ["descending"]
        cells = "#endpoints-table td.ip"
        backwards = [r.text for r in browser.find_elements(By.CSS_SELECTOR, cells)]
        browser.find_element(By.ID, "next-page").click()
        wait_for(browser, lambda: "cursor=" in browser.current_url)
        present(browser, By.ID, "endpoints-table")
        backwards += [r.text for r in browser.find_elements(By.CSS_SELECTOR, cells)]
        assert backwards == seen[::-1]

        # Sign out: the session is gone, pages ask for sign-in again.
        browser.find_element(By.CSS_SELECTOR, "form.signout button").click()
        wait_for(browser, lambda: "/console/sign-in" in browser.current_url)
        browser.get(url + "/console/tasks")
        assert "/console/sign-in" in browser.current_url


def test_csrf_failure_and_renderer_conflict_in_the_browser(database_url, tmp_path, browser):
    with (
        netmap_server(database_url, tmp_path / "server", runner=False) as server,
        evidence_on_failure(browser, tmp_path),
    ):
        url = server.url
        sign_in(browser, url, "admin", ADMIN_PASSWORD)

        # A form whose token was tampered with is refused with a page that says so.
        browser.get(url + "/console/tasks/new")
        browser.execute_script(
            "document.querySelector('#task-form input[name=csrf_token]').value = 'forged'"
        )
        fill(browser, "name", "csrf")
        fill(browser, "targets", "127.0.0.1")
        fill(browser, "ports", "80")
        browser.find_element(By.ID, "create-task").click()
        wait_for(
            browser,
            lambda: "This form could not be accepted" in present(browser, By.TAG_NAME, "h1").text,
        )

        # Publish from a stale page: another admin (the API session) published first.
        browser.get(url + "/console/admin/renderer")
        revision = int(text_of(browser, "desired-revision"))
        other = server.post(
            "/api/modules/report-render",
            json={"expectedRevision": revision, "releaseId": "builtin", "changeReason": "other"},
        )
        assert other.status_code == 200, other.text
        fill(browser, "release-id", "builtin")
        fill(browser, "change-reason", "from the browser")
        browser.find_element(By.ID, "publish").click()
        conflict = present(browser, By.ID, "revision-conflict").text
        assert f"revision {revision + 1} is now published" in conflict
        # The page now carries the current revision: sending again succeeds.
        browser.find_element(By.ID, "publish").click()
        assert "Published builtin" in present(browser, By.ID, "publish-notice").text
        assert text_of(browser, "desired-revision") == str(revision + 2)


def _renderer_state(driver) -> dict[str, str]:
    present(driver, By.ID, "renderer-state")
    return {
        name: text_of(driver, name)
        for name in (
            "desired-release",
            "desired-revision",
            "applied-release",
            "applied-revision",
            "available",
            "converged",
        )
    }


def _revisions(driver) -> list[tuple[str, str, str]]:
    rows = driver.find_elements(By.CSS_SELECTOR, "#revisions tbody tr")
    return [tuple(cell.text for cell in row.find_elements(By.TAG_NAME, "td"))[:3] for row in rows]


def _publish(driver, release_id: str, reason: str) -> None:
    fill(driver, "release-id", release_id)
    fill(driver, "change-reason", reason)
    driver.find_element(By.ID, "publish").click()


def _converged_on(driver, url: str, release_id: str, revision: int) -> dict[str, str]:
    """Reload the page until this web process runs ``release_id`` at ``revision``."""
    wanted = {
        "desired-release": release_id,
        "desired-revision": str(revision),
        "applied-release": release_id,
        "applied-revision": str(revision),
        "available": "yes",
        "converged": "yes",
    }

    def converged() -> bool:
        driver.get(url + "/console/admin/renderer")
        return _renderer_state(driver) == wanted

    wait_for(driver, converged, 90)
    return _renderer_state(driver)


def test_admin_publishes_a_renderer_release_and_rolls_back(
    database_url, tmp_path, browser, renderer_releases
):
    from tests.support.settings import RENDERER_RELEASES

    first, second = RENDERER_RELEASES
    with (
        netmap_server(
            database_url,
            tmp_path / "server",
            runner=False,
            NETMAP_REPORT_RENDERER_RELEASES_DIRECTORY=str(renderer_releases),
            NETMAP_REPORT_RENDERER_REFRESH_SECONDS="0.5",
        ) as server,
        evidence_on_failure(browser, tmp_path),
    ):
        url = server.url
        sign_in(browser, url, "admin", ADMIN_PASSWORD)
        present(browser, By.LINK_TEXT, "Renderer").click()
        start = _renderer_state(browser)
        base = int(start["desired-revision"])
        history = _revisions(browser)

        # Publish the first real release (a zipapp run in a worker process).
        _publish(browser, first, "first release from the console")
        notice = present(browser, By.ID, "publish-notice").text
        assert notice.startswith(f"Published {first} as revision {base + 1}")
        assert text_of(browser, "desired-release") == first
        assert _revisions(browser)[0] == (str(base + 1), first, "first release from the console")
        _converged_on(browser, url, first, base + 1)
        api_state = server.get("/api/modules/report-render").json()
        assert api_state["desired"] == {"release_id": first, "revision": base + 1}

        # A release that does not exist is refused; nothing changes.
        _publish(browser, "renderer-9.9.9", "typo")
        error = present(browser, By.ID, "publish-error").text
        assert "renderer-9.9.9" in error and "cannot be published" in error
        assert text_of(browser, "desired-revision") == str(base + 1)
        assert _revisions(browser)[0][0] == str(base + 1)

        # Upgrade to the second release.
        _publish(browser, second, "upgrade")
        assert present(browser, By.ID, "publish-notice").text.startswith(
            f"Published {second} as revision {base + 2}"
        )
        _converged_on(browser, url, second, base + 2)

        # Roll back: publish the earlier release id from the list, as the page says.
        assert first in [row[1] for row in _revisions(browser)]
        _publish(browser, first, "roll back to the first release")
        assert present(browser, By.ID, "publish-notice").text.startswith(
            f"Published {first} as revision {base + 3}"
        )
        state = _converged_on(browser, url, first, base + 3)
        assert state["desired-release"] == first
        assert _revisions(browser)[:3] == [
            (str(base + 3), first, "roll back to the first release"),
            (str(base + 2), second, "upgrade"),
            (str(base + 1), first, "first release from the console"),
        ]
        assert _revisions(browser)[3:] == history[: len(_revisions(browser)) - 3]
        api_state = server.get("/api/modules/report-render").json()
        assert api_state["desired"] == {"release_id": first, "revision": base + 3}
        no_script_ran(browser)


def test_traffic_chart_renders_under_the_strict_policy(database_url, tmp_path, browser):
    from datetime import UTC, datetime, timedelta

    from tests.integration.web.test_traffic_pages import _row

    token = "browser-traffic-token-0123456789abcdef"
    newest = datetime(2026, 8, 1, 2, 0, tzinfo=UTC)
    rows = [
        _row("www.example.com", newest - timedelta(minutes=5 * i), "/", 1 + i % 9)
        for i in range(60)
    ] + [_row("www.example.com", newest - timedelta(hours=2), "/", 5, granularity="day")]
    with (
        netmap_server(
            database_url, tmp_path / "server", runner=False, NETMAP_TRAFFIC_TOKEN=token
        ) as server,
        evidence_on_failure(browser, tmp_path),
    ):
        url = server.url
        posted = requests.post(
            url + "/api/traffic/rollups",
            json={"rows": rows},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert posted.status_code == 200, posted.text
        sign_in(browser, url, "admin", ADMIN_PASSWORD)
        present(browser, By.LINK_TEXT, "Traffic").click()
        chart = present(browser, By.ID, "traffic-chart")
        assert chart.size["width"] > 600 and chart.size["height"] > 300
        assert chart.get_attribute("role") == "img"
        title = browser.execute_script("return document.getElementById('traffic-chart-title')")
        assert title.get_attribute("textContent") == "www.example.com: traffic per 5 minutes"
        # The series is drawn, and coloured by the console's own stylesheet (no inline style).
        line = browser.find_element(By.CSS_SELECTOR, "polyline.requests")
        box = browser.execute_script("return arguments[0].getBBox()", line)
        assert box["width"] > 100 and box["height"] > 10
        assert line.value_of_css_property("stroke") == "rgb(10, 88, 202)"
        assert (
            sum(1 for _ in browser.find_elements(By.CSS_SELECTOR, "#traffic-table tbody tr")) == 60
        )

        # The form switches to day buckets without any script.
        browser.find_element(By.CSS_SELECTOR, "#t-granularity option[value=day]").click()
        browser.find_element(By.ID, "show-traffic").click()
        wait_for(browser, lambda: "granularity=day" in browser.current_url)
        title = present(browser, By.ID, "traffic-chart-title")
        assert title.get_attribute("textContent") == "www.example.com: traffic per day"
        # A bad range is answered on the page, not with a server error.
        fill(browser, "t-from", "2026-08-01")
        fill(browser, "t-to", "2026-07-01")
        browser.find_element(By.ID, "show-traffic").click()
        assert "to must be after from" in present(browser, By.ID, "traffic-error").text
        no_script_ran(browser)


# Form controls without an accessible name, and elements wider than the window: both
# computed by the browser itself, on the page as rendered.
_UNNAMED_CONTROLS = """
return Array.from(document.querySelectorAll('input, select, textarea, button'))
  .filter(e => e.type !== 'hidden')
  .filter(e => {
    if (e.tagName === 'BUTTON') return !e.textContent.trim() && !e.getAttribute('aria-label');
    if (e.getAttribute('aria-label') || e.getAttribute('aria-labelledby')) return false;
    if (e.closest('label')) return false;
    return !(e.id && document.querySelector('label[for="' + e.id + '"]'));
  })
  .map(e => e.outerHTML.slice(0, 120));
"""
_SIDEWAYS = "return document.documentElement.scrollWidth - window.innerWidth;"
# Text whose colour on its (first opaque) background is below WCAG AA's 4.5:1.
_LOW_CONTRAST = """
const rgb = c => (c.match(/[0-9.]+/g) || []).map(Number);
const lum = ([r, g, b]) => {
  const f = v => {
    v /= 255;
    return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
};
const background = e => {
  for (; e; e = e.parentElement) {
    const c = rgb(getComputedStyle(e).backgroundColor);
    if (c.length === 3 || c[3] > 0.99) return c;
  }
  return [255, 255, 255];
};
const low = [];
for (const e of document.querySelectorAll('body *')) {
  if (!Array.from(e.childNodes).some(n => n.nodeType === 3 && n.textContent.trim())) continue;
  if (!e.getClientRects().length) continue;
  const a = lum(rgb(getComputedStyle(e).color)), b = lum(background(e));
  const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  if (ratio < 4.5) low.push(e.tagName + '.' + e.className + ' ' + ratio.toFixed(2));
}
return low;
"""


def test_every_page_fits_a_phone_names_its_controls_and_has_contrast(
    database_url, tmp_path, browser
):
    with (
        netmap_server(database_url, tmp_path / "server", runner=False) as server,
        evidence_on_failure(browser, tmp_path),
    ):
        url = server.url
        sign_in(browser, url, "admin", ADMIN_PASSWORD)
        browser.get(url + "/console/tasks/new")
        fill(browser, "name", "phone")
        fill(browser, "targets", "127.0.0.1\n")
        fill(browser, "ports", "22")
        browser.find_element(By.ID, "create-task").click()
        present(browser, By.ID, "task-status")
        task = browser.current_url.rstrip("/").rsplit("/", 1)[1]
        pages = [
            "/console/",
            "/console/tasks",
            "/console/tasks/new",
            f"/console/tasks/{task}",
            f"/console/tasks/{task}/results",
            f"/console/tasks/{task}/changes",
            "/console/assets",
            "/console/assets/history?ip=127.0.0.1&port=22&transport=tcp",
            "/console/exports",
            "/console/reports",
            "/console/traffic",
            "/console/scanners",
            "/console/users",
            "/console/admin/renderer",
            "/console/admin/resources",
            "/console/admin/slow-sql",
            "/console/tokens",
            "/console/account",
            "/console/admin/audit",
            "/console/changes",
            "/console/assets?q=port%3A22",  # with the save-this-search form
        ]
        for width in (375, 1280):
            browser.set_window_size(width, 900)
            for page in pages:
                browser.get(url + page)
                present(browser, By.TAG_NAME, "main")
                # Wide tables scroll inside their own box; the page itself never sideways.
                assert browser.execute_script(_SIDEWAYS) <= 1, (width, page)
                assert browser.execute_script(_UNNAMED_CONTROLS) == [], (width, page)
                assert browser.execute_script(_LOW_CONTRAST) == [], (width, page)
                # Focus order is document order (no tabindex anywhere), and its first stop
                # is the skip link to the main content.
                first = browser.execute_script(
                    "return document.querySelector('a, button, input, select, textarea')"
                    ".getAttribute('href');"
                )
                assert first == "#main", (width, page)
                assert not browser.find_elements(By.CSS_SELECTOR, "[tabindex]"), (width, page)
        # The saved searches, opened, with the buttons of another search: they scroll in
        # their own box (the page went 130 px sideways).
        browser.set_window_size(375, 900)
        browser.get(url + "/console/assets?q=" + "port%3A22%20" * 6)
        fill(browser, "save-name", "a search with a long query")
        browser.find_element(By.CSS_SELECTOR, "#save-search-form button").click()
        present(browser, By.CSS_SELECTOR, "#saved-searches")  # saved: listed on the page
        browser.get(url + "/console/assets?q=port%3A443")
        browser.execute_script("document.getElementById('saved-searches').open = true;")
        present(browser, By.CSS_SELECTOR, "[data-update-search]")
        assert browser.execute_script(_SIDEWAYS) <= 1
        # A new API token's notice (the secret and a curl line) fits a phone too.
        browser.set_window_size(375, 900)
        browser.get(url + "/console/tokens")
        fill(browser, "token-name", "phone")
        browser.find_element(By.ID, "make-token").click()
        assert present(browser, By.ID, "token-value").text.startswith("nmu_")
        assert browser.execute_script(_SIDEWAYS) <= 1
        assert browser.execute_script(_LOW_CONTRAST) == []
        # The probes see what they look for: a page made too wide, an unnamed control.
        browser.execute_script(
            "const d = document.createElement('div'); d.style.width = '3000px';"
            "d.style.color = '#bbbbbb'; d.style.background = '#ffffff';"
            "d.textContent = 'x'; document.body.appendChild(d);"
            "document.body.appendChild(document.createElement('input'));"
        )
        assert browser.execute_script(_SIDEWAYS) > 1
        assert len(browser.execute_script(_UNNAMED_CONTROLS)) == 1
        assert len(browser.execute_script(_LOW_CONTRAST)) == 1


# The asset filter bar's geometry: how far it reaches past its own box and past the page,
# and every label that ended a line while its field started the next one.
_FILTER_BAR = """
const form = document.getElementById('asset-search');
const box = form.getBoundingClientRect();
const split = [];
for (const label of form.querySelectorAll('label[for]')) {
  const field = document.getElementById(label.htmlFor);
  const a = label.getBoundingClientRect(), b = field.getBoundingClientRect();
  if (b.top >= a.bottom - 1) split.push(label.htmlFor);
}
const controls = Array.from(form.querySelectorAll('input:not([type=hidden]), select, button'));
return {
  overflow: form.scrollWidth - form.clientWidth,
  past_page: Math.max(...controls.map(c => c.getBoundingClientRect().right)) - window.innerWidth,
  past_box: Math.max(...controls.map(c => c.getBoundingClientRect().right)) - box.right,
  split: split,
  search_width: document.getElementById('f-q').getBoundingClientRect().width,
  sideways: document.documentElement.scrollWidth - window.innerWidth,
  table_sideways: (() => {
    const t = document.querySelector('main table');
    const s = t && t.closest('.scroll');
    return t ? (s ? s.getBoundingClientRect().right - window.innerWidth : 1e6) : 0;
  })(),
};
"""


def test_the_asset_filter_bar_and_table_fit_a_laptop_and_a_narrow_window(
    database_url, tmp_path, browser
):
    with (
        netmap_server(database_url, tmp_path / "server") as server,
        evidence_on_failure(browser, tmp_path),
    ):
        url = server.url
        created = server.post(
            "/api/tasks", json={"name": "fit", "targets": ["127.0.0.1"], "ports": "22,443"}
        )
        assert created.status_code == 201, created.text
        long_product = "Very-Long-Product-Name-Without-Any-Break-" * 4
        scanner_upload(
            url,
            server.scanner_token("fit"),
            [
                observation(
                    "127.0.0.1",
                    443,
                    hostname="a-rather-long-host-name.internal.example.com",
                    service={"name": "https", "product": long_product, "version": "1.2.3"},
                )
            ],
        )
        sign_in(browser, url, "admin", ADMIN_PASSWORD)  # an admin has every filter
        page = url + "/console/assets?scope=global&q=" + "port:443%20" * 12

        def published() -> bool:
            # The long row is what the table must hold: measure once the runner has
            # published it, not the empty table before (a different layout).
            browser.get(page)
            cells = browser.find_elements(By.CSS_SELECTOR, "main table td")
            return any("127.0.0.1" in cell.text for cell in cells)

        wait_for(browser, published, 120)
        for width in (1366, 1024, 480, 360):
            browser.set_window_size(width, 900)
            browser.get(page)
            present(browser, By.ID, "asset-search")
            wait_for(browser, lambda: browser.find_elements(By.CSS_SELECTOR, "main table td"))
            bar = browser.execute_script(_FILTER_BAR)
            assert bar["overflow"] <= 1, (width, bar)
            assert bar["past_page"] <= 1 and bar["past_box"] <= 1, (width, bar)
            assert bar["split"] == [], (width, bar)  # a label stays beside its field
            # The search language needs room: the box takes what the other filters leave.
            assert bar["search_width"] >= (300 if width >= 1024 else 240), (width, bar)
            browser.save_screenshot(str(tmp_path / f"assets-{width}.png"))
            assert bar["sideways"] <= 1, (width, bar)  # the table scrolls in its own box
            assert bar["table_sideways"] <= 1, (width, bar)
