"""The HTML report as a person sees it: rendered by headless Chromium (Debian chromium + chromium-driver,
driven through selenium), assertions on visible text only.

The report comes from a real audit of tests/audit/report_pipeline.py's destination:
1-minute windows, data in minutes 0-2 and 24-25, a 21-minute hole (minutes 3-23)
and a loss (rep-lossy, minute 1: 10 of 15 acknowledged loaded). Skipped only when
chromium or chromedriver is not installed (scripts/bootstrap.sh installs both).
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import run_audit
from ingest.audit.report_html import write_html
from ingest.audit.times import MINUTES, label
from ingest.clock import FakeClock
from tests.audit.report_pipeline import END_MINUTE, HOLE, LOSSY_ACKED, LOSSY_LOADED, MINUTE, PV

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="Debian chromium + chromium-driver not installed (scripts/bootstrap.sh)")
REPR = re.compile(r"[\[({]'|'[\])}]|': |Status\.|<Status|\bNone\b|\bTrue\b|\bFalse\b")


@pytest.fixture(scope="module")
def report(spark, gap_and_loss, tmp_path_factory):
    b = gap_and_loss
    cfg = AUDIT_CONFIG.parse({"destination": str(b.dest), "window.ms": MINUTE, "grace.ms": MINUTE,
                              "window.lookback": 0, "history.enabled": "false"})
    run = run_audit(spark, cfg, clock=FakeClock(b.minute(40)), from_ms=b.minute(0), to_ms=b.minute(END_MINUTE))
    return run, write_html(run, tmp_path_factory.mktemp("report-html") / "audit.html")


@pytest.fixture(scope="module")
def page(report):
    from selenium import webdriver  # deferred: a test-only dependency, imported only when chromium exists
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=2400,1600"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)  # chromedriver is stopped by quit()
    try:
        driver.get(report[1].as_uri())
        yield driver
    finally:
        driver.quit()


def texts(elements) -> list[str]:
    return [e.text for e in elements]


def test_the_grid_has_one_column_per_window_and_the_header_names_its_first_and_last(gap_and_loss, report, page):
    b = gap_and_loss
    run, _ = report
    assert run.exit_code == 3
    heads = page.find_elements("css selector", "table.grid th.col")
    expected = [label(b.minute(m), MINUTES) for m in range(END_MINUTE)]
    assert texts(heads) == expected  # 26 windows, consistent labels, in time order
    gap = page.find_elements("css selector", "table.grid th.col.gap")
    assert texts(gap) == [label(b.minute(m), MINUTES) for m in HOLE] and len(gap) == 21  # the 21-minute hole
    assert page.find_element("css selector", ".range-first").text == expected[0]
    assert page.find_element("css selector", ".range-last").text == expected[-1]
    assert page.find_element("css selector", "p.range").text.startswith(
        f"Windows starting {expected[0]} to {expected[-1]} UTC (26 windows of 1 min, the last ending "
        f"{label(b.minute(END_MINUTE), MINUTES)});")
    verdict = page.find_element("css selector", ".verdict").text
    assert verdict == f"DATA LOSS: {LOSSY_ACKED - LOSSY_LOADED} acknowledged messages missing (exit 3)"


def test_each_cell_shows_its_counts_and_empty_cells_are_in_the_legend(gap_and_loss, report, page):
    b = gap_and_loss
    run, _ = report
    rows = {(r["topic"], r["window_start_ms"]): r for r in run.rows if r["row_type"] == "window"}
    grid = page.find_element("css selector", "table.grid")
    body = grid.find_elements("css selector", "tr")[1:]
    shown = {}
    for tr in body:
        tds = tr.find_elements("css selector", "td")
        shown[tds[0].text] = [td.text for td in tds[1:]]
    assert sorted(shown) == ["rep-lossy", "rep-pv"]
    for topic, cells in shown.items():
        assert len(cells) == END_MINUTE
        for m, text in enumerate(cells):
            r = rows.get((topic, b.minute(m)))
            assert text == ("" if r is None else f"{r['loaded_distinct']}/{r['produced_acked']}"), (topic, m)
    assert [shown["rep-pv"][m] for m in PV] == [f"{n}/{n}" for n in PV.values()]
    assert shown["rep-lossy"][1] == f"{LOSSY_LOADED}/{LOSSY_ACKED}" and shown["rep-lossy"][2] == "0/0"  # heartbeat
    assert all(shown[t][m] == "" for t in shown for m in HOLE)
    empty = grid.find_elements("css selector", "td.empty")
    assert len(empty) == 2 * END_MINUTE - 5 - 2  # every cell without a row (pv: 5 windows, lossy: 2)
    legend = texts(page.find_elements("css selector", ".legend span"))
    assert "empty" in legend and "COMPLETE" in legend and "DATA_LOSS" in legend


def test_no_python_reprs_and_the_docs_pointer_is_a_link(report, page):
    visible = page.find_element("css selector", "body").text
    assert not REPR.findall(visible), REPR.findall(visible)[:5]
    inputs = {tr.find_elements("css selector", "td")[0].text: tr.find_elements("css selector", "td")[1].text
              for tr in page.find_elements("css selector", "table.inputs tr")}
    assert (inputs["topics"], inputs["tiered_topics"], inputs["producer_window_ms"]) == ("rep-lossy, rep-pv", "-", "60000")
    assert re.match(r"loader state [0-9.]+, monitoring [0-9.]+, ", inputs["step_seconds"]), inputs["step_seconds"]
    links = page.find_elements("css selector", "p.docs a")
    assert texts(links) == ["docs/audit.md"]
    href = links[0].get_attribute("href")
    assert href.startswith("file://") and Path(unquote(urlparse(href).path)).is_file()
    assert Path(unquote(urlparse(href).path)).name == "audit.md"
