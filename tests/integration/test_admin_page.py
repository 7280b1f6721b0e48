"""The admin page in a real browser: Debian's chromium driven headless by Playwright.

With CI set, a missing browser or Playwright fails these tests instead of skipping them
(`.ci/run` installs both). Set UPDATE_DOCS_SCREENSHOT=1 to refresh docs/admin-page.png.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest
from support.readers import NOT_FOUND, Reader, plan_for
from support.servers import add_users, own_warehouse, running_server

from starscan.client import StarscanClient

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _browser_or_skip():
    missing = None
    try:
        from playwright.sync_api import sync_playwright  # noqa: F401
    except ImportError:
        missing = "playwright is not installed (pip install -e '.[test]')"
    if missing is None and not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        missing = f"no chromium at {CHROMIUM} (apt-get install chromium)"
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI: the admin page browser test cannot run: {missing}")
        pytest.skip(missing)


@pytest.fixture(scope="module")
def browser():
    _browser_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        exe = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
        b = pw.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def admin_server(spark, base_settings, tmp_path_factory):
    warehouse = own_warehouse(spark, tmp_path_factory.mktemp("admin") / "warehouse")
    add_users(warehouse, {"ops": ("ops-pw", ("admin",)),     # the admin grant, no SELECT
                          "bob": ("bob-pw", ("db1.*",))})    # SELECT only
    path = warehouse / "db1.db" / "events"
    spark.range(0, 60_000, numPartitions=2).selectExpr("id", "id % 7 as kind", "repeat('e', 20) as payload") \
        .write.mode("overwrite").parquet(str(path))
    settings = base_settings.model_copy(update={"warehouse": warehouse, "http_port": 0, "be_port": 0, "query_port": 0})
    with running_server(spark, settings) as srv:
        yield srv


def test_admin_page_lists_and_closes_a_scanner(admin_server, browser):
    fe_url = f"http://127.0.0.1:{admin_server.http_port}"
    be_addr = ("127.0.0.1", admin_server.be_port)
    root = StarscanClient(fe_url, "root", "")
    plan_b64, tablets = plan_for(root, "db1", "events", "select id, kind, payload from db1.events where kind < 5")
    plan_t1, tablets_t1 = plan_for(root, "db1", "t1", "select k1, v1 from db1.t1")
    reader, other = Reader(be_addr), Reader(be_addr)
    try:
        cid = reader.open_ok("db1", "events", plan_b64, tablets, batch_size=4096)
        offset = 0
        for _ in range(3):
            offset += reader.next_batch(cid, offset).num_rows
        keep = other.open_ok("db1", "t1", plan_t1, tablets_t1, batch_size=1)
        other.next_batch(keep, 0)

        context = browser.new_context(http_credentials={"username": "ops", "password": "ops-pw"},
                                      viewport={"width": 1400, "height": 900})
        page = context.new_page()
        resp = page.goto(f"{fe_url}/admin")
        assert resp.status == 200
        row = page.locator(f'#scanners-body tr[data-id="{cid}"]')
        row.wait_for(timeout=30_000)
        text = row.inner_text()
        assert "root" in text and "db1.events" in text and "id, kind, payload" in text
        assert f"{offset:,}" in text  # rows sent so far
        assert page.locator(f'#scanners-body tr[data-id="{keep}"]').count() == 1
        # Recent plans and the throughput chart (drawn by the script once it has refreshed).
        page.locator("#plans-body tr", has_text="db1.events").first.wait_for(timeout=30_000)
        page.wait_for_function("document.getElementById('rate').textContent.includes('/s')", timeout=30_000)
        assert page.locator("canvas#chart").is_visible()
        shot = DOCS / "admin-page.png" if os.environ.get("UPDATE_DOCS_SCREENSHOT") else None
        if shot is not None:
            page.screenshot(path=str(shot), full_page=True)

        row.locator("button.close").click()
        page.locator(f'#scanners-body tr[data-id="{cid}"]').wait_for(state="detached", timeout=30_000)
        assert page.locator(f'#scanners-body tr[data-id="{keep}"]').count() == 1  # only that one closed
        gone = reader.next(cid, offset)
        assert gone.status.status_code == NOT_FOUND, gone.status
        assert other.next(keep, 1).status.status_code == 0
        context.close()
    finally:
        for r, c in ((other, keep),):
            r.close_scanner(c)
        reader.close()
        other.close()


def test_admin_page_refuses_users_without_the_admin_grant(admin_server, browser):
    fe_url = f"http://127.0.0.1:{admin_server.http_port}"
    context = browser.new_context(http_credentials={"username": "bob", "password": "bob-pw"})
    page = context.new_page()
    resp = page.goto(f"{fe_url}/admin")
    assert resp.status == 403
    assert "admin grant" in page.locator("#refused").inner_text()
    assert page.locator("#scanners").count() == 0
    context.close()
    for path in ("/api/admin/state", "/api/scanners", "/varz"):
        assert httpx.get(f"{fe_url}{path}", auth=("bob", "bob-pw")).status_code == 403, path
        assert httpx.get(f"{fe_url}{path}", auth=("ops", "wrong")).status_code == 401, path
    assert httpx.post(f"{fe_url}/api/scanners/x/close", auth=("bob", "bob-pw")).status_code == 403
    # No credentials: the browser is asked for them.
    anonymous = httpx.get(f"{fe_url}/admin")
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Basic")
