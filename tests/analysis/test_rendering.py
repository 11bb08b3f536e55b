"""The HTML advisory report and the join plot, opened in a real headless Chromium.

Skipped only where Chromium is not installed (Debian package `chromium`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.analysis.join_cli import join
from rlmesh_stream.consumers.analysis.report_cli import report
from tests.analysis.analysis_chromium import Chromium, chromium_binary
from tests.analysis.analysis_stores import advisory, at, episode, insert, make_store

BINARY = chromium_binary()
pytestmark = pytest.mark.skipif(
    BINARY is None, reason="chromium is not installed (apt-get install -y chromium)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    assert BINARY is not None
    chromium = Chromium(BINARY)
    yield chromium
    chromium.close()


@pytest.fixture
def advisory_page(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.duckdb"
    con = make_store(path)
    insert(con, "advisories", [
        advisory("s1", "action", "info", "action cast float64 -> float32", count=9),
        advisory("s1", "observation", "caution", "depth filled with zeros", count=3),
        advisory("s2", "observation", "caution", "depth filled with zeros", count=1,
                 model_component_id="sac"),
    ])
    con.close()
    out = tmp_path / "advisories.html"
    result = CliRunner().invoke(report, ["advisories", "--sink", f"duckdb://{path}",
                                         "--format", "html", "--output", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def plot_prefix(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    con = make_store(path)
    insert(con, "episodes", [episode("s", i, started_at=at(10 * i), success=i % 2 == 0,
                                     cumulative_reward=float(i)) for i in range(1, 7)])
    con.close()
    log = tmp_path / "train.csv"
    log.write_text("step,time,checkpoint,loss\n"
                   "100,2026-03-01T12:00:00Z,c100,0.9\n"
                   "200,2026-03-01T12:00:25Z,c200,0.5\n"
                   "300,2026-03-01T12:00:45Z,c300,0.3\n")
    prefix = tmp_path / "plot"
    result = CliRunner().invoke(join, ["--sink", f"duckdb://{path}", "--log", str(log),
                                       "--by", "asof", "--plot", str(prefix)])
    assert result.exit_code == 0, result.output
    return prefix


@pytest.fixture
def episodes_page(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    con = make_store(path)
    insert(con, "episodes", [episode("s", i, started_at=at(10 * i), success=i % 2 == 0,
                                     cumulative_reward=float(i)) for i in range(1, 7)])
    con.close()
    out = tmp_path / "episodes.html"
    result = CliRunner().invoke(report, ["episodes", "--sink", f"duckdb://{path}",
                                         "--format", "html", "--output", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("page_fixture", ["episodes_page", "advisory_page"])
def test_a_report_shows_every_column_in_a_1300_px_window(
    browser: Chromium, page_fixture: str, request: pytest.FixtureRequest,
) -> None:
    page_path: Path = request.getfixturevalue(page_fixture)
    with browser.open(page_path.as_uri()) as page:
        page.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1300, "height": 800, "deviceScaleFactor": 1, "mobile": False})
        page.settle()
        hidden = page.evaluate(
            "(() => { const w = document.querySelector('.table-wrap');"
            " return w.scrollWidth - w.clientWidth; })()")
        assert page.errors == []
    assert hidden <= 0


def test_advisory_html_renders_without_console_errors(browser: Chromium,
                                                      advisory_page: Path) -> None:
    with browser.open(advisory_page.as_uri()) as page:
        assert page.evaluate("document.querySelectorAll('tbody tr').length") == 3
        assert page.errors == []


def test_advisory_html_shows_caution_rows_first_and_highlighted(browser: Chromium,
                                                                advisory_page: Path) -> None:
    with browser.open(advisory_page.as_uri()) as page:
        classes = page.evaluate(
            "[...document.querySelectorAll('tbody tr')].map(r => r.className)")
        caution_text = page.evaluate(
            "[...document.querySelectorAll('tr.caution')].map(r => r.innerText)")
        background = page.evaluate(
            "getComputedStyle(document.querySelector('tr.caution td')).backgroundColor")
    assert classes == ["caution", "caution", "info"]
    assert all("depth filled with zeros" in text for text in caution_text)
    assert background == "rgb(254, 243, 242)"  # the stylesheet applied: the page is styled


def test_plot_svg_renders_both_y_axes_of_each_panel(browser: Chromium,
                                                    plot_prefix: Path) -> None:
    with browser.open(plot_prefix.with_suffix(".svg").as_uri()) as page:
        found = page.evaluate(
            "['axis-success', 'axis-reward', 'axis-metric-success', 'axis-metric-reward']"
            ".filter(id => document.getElementById(id) !== null)")
        text = page.evaluate("document.documentElement.textContent")
        width = page.evaluate("document.documentElement.getBoundingClientRect().width")
        assert page.errors == []
    assert found == ["axis-success", "axis-reward", "axis-metric-success", "axis-metric-reward"]
    assert width > 0
    for label in ("training step", "success rate (%)", "mean episode reward", "loss"):
        assert label in text


def test_plot_png_renders_as_an_image(browser: Chromium, plot_prefix: Path) -> None:
    with browser.open(plot_prefix.with_suffix(".png").as_uri()) as page:
        size = page.evaluate("[document.images[0].naturalWidth, document.images[0].naturalHeight]")
        assert page.errors == []
    assert size[0] > 500 and size[1] > 400
