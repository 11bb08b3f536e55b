"""Renderers: one `Report`, four outputs (terminal table, Markdown, JSON, standalone HTML).

The HTML page embeds its stylesheet and loads nothing: reports are mailed,
attached to CI runs and opened offline, so they must not depend on a network.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import json
from typing import Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rlmesh_stream.consumers.analysis.reports.model import Report, format_value, json_value

Format = Literal["table", "markdown", "json", "html"]
FORMATS: tuple[str, ...] = ("table", "markdown", "json", "html")

_ROW_STYLES = {"caution": "bold red", "info": "cyan", "warn": "yellow"}


def render(report: Report, fmt: str, *, width: int = 160, color: bool = False) -> str:
    """The report as text in `fmt`; raises ValueError for an unknown format."""
    if fmt == "table":
        return render_table(report, width=width, color=color)
    if fmt == "markdown":
        return render_markdown(report)
    if fmt == "json":
        return render_json(report)
    if fmt == "html":
        return render_html(report)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def render_table(report: Report, *, width: int = 160, color: bool = False) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, no_color=not color,
                      highlight=False)
    table = Table(title=report.title, title_justify="left", show_lines=False)
    for col in report.columns:
        table.add_column(col.label, justify=col.align, overflow="fold")
    for i, row in enumerate(report.rows):
        cells = [format_value(row.get(c.key), c.kind) for c in report.columns]
        table.add_row(*cells, style=_ROW_STYLES.get(report.row_class(i), ""))
    if report.summary:
        console.print(Text("  ".join(f"{k}: {format_value(v, 'text')}"
                                     for k, v in report.summary.items())))
    if report.rows:
        console.print(table)
    else:
        console.print(f"{report.title}: {report.empty_message}")
    for note in report.notes:
        console.print(Text(f"note: {note}"))
    return buf.getvalue()


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report) -> str:
    lines = [f"## {report.title}", ""]
    if report.summary:
        lines += [f"- **{k}**: {format_value(v, 'text')}" for k, v in report.summary.items()]
        lines.append("")
    if not report.rows:
        lines.append(f"_{report.empty_message}_")
    else:
        lines.append("| " + " | ".join(_md_cell(c.label) for c in report.columns) + " |")
        lines.append("| " + " | ".join("---:" if c.align == "right" else "---"
                                       for c in report.columns) + " |")
        for row in report.rows:
            lines.append("| " + " | ".join(_md_cell(format_value(row.get(c.key), c.kind))
                                           for c in report.columns) + " |")
    if report.notes:
        lines.append("")
        lines += [f"> {note}" for note in report.notes]
    return "\n".join(lines) + "\n"


def render_json(report: Report) -> str:
    doc = {
        "report": report.name,
        "title": report.title,
        "summary": {k: json_value(v) for k, v in report.summary.items()},
        "columns": [c.key for c in report.columns],
        "rows": [{c.key: json_value(row.get(c.key)) for c in report.columns}
                 for row in report.rows],
        "notes": report.notes,
    }
    # allow_nan=False: strict JSON; json_value has spelled non-finite numbers as strings.
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


_CSS = """
:root { --fg:#1d2330; --muted:#5c667a; --line:#e3e7ee; --bg:#f6f7fb; --card:#fff;
  --caution:#b42318; --caution-bg:#fef3f2; --info:#175cd3; --info-bg:#eff8ff; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
  font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Liberation Sans",sans-serif; }
main { max-width:1440px; margin:0 auto; padding:32px 24px 48px; }
h1 { font-size:22px; margin:0 0 4px; }
.generated { color:var(--muted); margin:0 0 20px; font-size:13px; }
.cards { display:flex; flex-wrap:wrap; gap:12px; margin-bottom:20px; }
.card { background:var(--card); border:1px solid var(--line); border-radius:10px;
  padding:12px 16px; min-width:150px; }
.card .label { color:var(--muted); font-size:12px; text-transform:uppercase;
  letter-spacing:.04em; }
.card .value { font-size:22px; font-weight:600; margin-top:2px; }
.table-wrap { background:var(--card); border:1px solid var(--line); border-radius:10px;
  overflow-x:auto; }
table { border-collapse:collapse; width:100%; }
th, td { padding:8px 12px; border-bottom:1px solid var(--line); text-align:left;
  vertical-align:top; }
th { background:#fafbfc; font-size:12px; color:var(--muted); text-transform:uppercase;
  letter-spacing:.04em; position:sticky; top:0; }
td.time { white-space:nowrap; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
td.num { white-space:nowrap; }
tr:last-child td { border-bottom:none; }
tr.caution td { background:var(--caution-bg); }
tr.caution td:first-child { box-shadow: inset 4px 0 0 var(--caution); }
tr.info td:first-child { box-shadow: inset 4px 0 0 var(--info); }
.badge { display:inline-block; padding:1px 8px; border-radius:999px; font-size:12px;
  font-weight:600; }
.badge.caution { color:var(--caution); background:#fee4e2; }
.badge.info { color:var(--info); background:var(--info-bg); }
.empty { padding:24px; color:var(--muted); }
.notes { color:var(--muted); margin-top:16px; }
code, .mono { font-family:ui-monospace,"DejaVu Sans Mono",monospace; font-size:13px; }
"""


def render_html(report: Report, *, generated_at: dt.datetime | None = None) -> str:
    """A standalone page: inline CSS, no scripts, no external assets."""
    generated_at = generated_at or dt.datetime.now(dt.UTC)
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(report.title)}</title>",
        # An inline empty icon stops the browser from requesting /favicon.ico.
        '<link rel="icon" href="data:,">',
        f"<style>{_CSS}</style></head><body><main>",
        f"<h1>{esc(report.title)}</h1>",
        f'<p class="generated">Generated {esc(format_value(generated_at, "time"))} '
        f"by rlmesh-stream</p>",
    ]
    if report.summary:
        parts.append('<section class="cards">')
        for label, value in report.summary.items():
            parts.append(f'<div class="card"><div class="label">{esc(label)}</div>'
                         f'<div class="value">{esc(format_value(value, "text"))}</div></div>')
        parts.append("</section>")
    parts.append(f'<div class="table-wrap" data-report="{esc(report.name)}">')
    if not report.rows:
        parts.append(f'<p class="empty">{esc(report.empty_message)}</p>')
    else:
        parts.append("<table><thead><tr>")
        for col in report.columns:
            cls = ' class="num"' if col.align == "right" else ""
            parts.append(f"<th{cls}>{esc(col.label)}</th>")
        parts.append("</tr></thead><tbody>")
        for i, row in enumerate(report.rows):
            rc = report.row_class(i)
            parts.append(f'<tr class="{esc(rc)}">' if rc else "<tr>")
            for col in report.columns:
                text = esc(format_value(row.get(col.key), col.kind))
                if col.key == "severity" and row.get(col.key):
                    text = f'<span class="badge {esc(str(row[col.key]))}">{text}</span>'
                cls = (' class="num"' if col.align == "right"
                       else ' class="time"' if col.kind == "time" else "")
                parts.append(f"<td{cls}>{text}</td>")
            parts.append("</tr>")
        parts.append("</tbody></table>")
    parts.append("</div>")
    if report.notes:
        parts.append('<div class="notes">' + "".join(f"<p>{esc(n)}</p>" for n in report.notes)
                     + "</div>")
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"
