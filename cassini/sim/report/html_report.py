"""``report.html``: one static page gathering a run's tables and pictures, every number
in a cell whose ``data-key`` names it in the unit shown (docs/internals.md)."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Excess demand's one label and unit, wherever it is shown (page, terminal table): the
#: seconds a link's demand exceeded its capacity, summed over links (link-seconds).
EXCESS_LABEL = "excess demand"
EXCESS_UNIT = "link·s"

#: Summary columns: (key in a scheme's summary, header, scale, unit).
SUMMARY_COLUMNS = (
    ("jobs", "jobs", 1, ""),
    ("mean_iteration_s", "mean iteration", 1e3, "ms"),
    ("p99_iteration_s", "p99 iteration", 1e3, "ms"),
    ("mean_slowdown", "mean slowdown", 1, "×"),
    ("p99_slowdown", "p99 slowdown", 1, "×"),
    ("mean_jct_s", "mean JCT", 1, "s"),
    ("p99_jct_s", "p99 JCT", 1, "s"),
    ("makespan_s", "makespan", 1, "s"),
    ("excess_demand_s_total", EXCESS_LABEL, 1, EXCESS_UNIT),
    ("wall_s", "wall time", 1, "s"),
)

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1150px; color: #222 }
h1 { font-size: 1.5em } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ccc }
table { border-collapse: collapse; margin: .6em 0; font-size: .9em }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right }
th:first-child, td:first-child { text-align: left }
td.num { font-variant-numeric: tabular-nums }
figure { margin: 1em 0 } img { max-width: 100%; border: 1px solid #eee }
figcaption { font-size: .85em; color: #555 } ul.notes li { font-size: .9em }
"""

SCRIPT = """
window.addEventListener('load', function () {
  var ok = 0;
  document.querySelectorAll('img').forEach(function (img) {
    var good = img.complete && img.naturalWidth > 0;
    img.setAttribute('data-loaded', good ? 'true' : 'false');
    if (good) { ok += 1; }
  });
  document.body.setAttribute('data-images-loaded', String(ok));
});
"""


def number(value: Any) -> str:
    """How the page prints a number: four significant digits, whole numbers from 10,000
    up; "–" for none (docs/internals.md, ``report/html_report.py``)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, int):
        return str(value)
    return f"{value:.0f}" if abs(value) >= 1e4 else f"{value:.4g}"


def text(value: Any) -> str:
    """A value as people read it (never a Python repr): numbers by :func:`number`,
    mappings as ``key: value, ...``, lists as ``a, b``, booleans in lower case."""
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {text(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(text(v) for v in value)
    if isinstance(value, bool):
        return str(value).lower()
    if value is None or isinstance(value, int | float):
        return number(value)
    return str(value)


def cell_key(key: str, unit: str) -> str:
    """The ``data-key`` of a summary column: results.json's key, its ``_s`` made ``_ms``
    when the page shows milliseconds."""
    return key[: -len("_s")] + "_ms" if unit == "ms" and key.endswith("_s") else key


def _cell(value: Any, key: str | None = None) -> str:
    attr = f' data-key="{html.escape(key)}"' if key else ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f'<td class="num"{attr}>{number(value)}</td>'
    return f"<td{attr}>{html.escape(text(value))}</td>"


def _table(head: Sequence[str], rows: Sequence[str], table_id: str) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(rows)
    return f'<table id="{table_id}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _figure(path: Path, caption: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(caption)}" '
        f'data-file="{html.escape(path.name)}"><figcaption>{html.escape(caption)} '
        f"({html.escape(path.name)})</figcaption></figure>"
    )


def _summary_section(data: Mapping[str, Any]) -> list[str]:
    """The schemes' summary table and, when the run has them, the baseline/CASSINI ratios."""
    head = ["scheme"] + [f"{h} ({u})" if u else h for _, h, _, u in SUMMARY_COLUMNS]
    rows = []
    for name, s in data["summaries"].items():
        cells = "".join(
            _cell(s[key] * scale if scale != 1 else s[key], cell_key(key, unit))
            for key, _, scale, unit in SUMMARY_COLUMNS
        )
        rows.append(f'<tr data-scheme="{html.escape(name)}">{_cell(name)}{cells}</tr>')
    parts = [
        "<h2>Schemes</h2>",
        "<p>Iteration times over every iteration of every job; slowdown = iteration time "
        f"over the job's dedicated iteration time; {EXCESS_LABEL} ({EXCESS_UNIT}): seconds "
        "a link's demand exceeded its capacity, summed over links.</p>",
        _table(head, rows, "summary"),
    ]
    if data.get("ratios"):
        parts += _ratios_section(data["ratios"])
    return parts


def _ratios_section(ratios: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Baseline over CASSINI per pair, headed as the summary; a metric CASSINI brought to
    0 (``cassini_zero``: its ratio is infinite) reads "0 of X: all removed"."""
    labels = {key: label for key, label, _, _ in SUMMARY_COLUMNS}
    metrics = [m for m in labels if any(m in r for r in ratios.values())]
    rows = []
    for pair, r in ratios.items():
        zero = r.get("cassini_zero", {})
        cells = "".join(
            f'<td data-key="{html.escape(m)}">0 of {number(zero[m])}: all removed</td>'
            if m in zero
            else _cell(r.get(m), m)
            for m in metrics
        )
        rows.append(f'<tr data-pair="{html.escape(pair)}">{_cell(pair)}{cells}</tr>')
    return [
        "<h2>Baseline over CASSINI</h2><p>Each metric of the baseline over CASSINI's: "
        "&gt; 1: CASSINI is better; \u2013: both 0, nothing to compare; \u201c0 of X\u201d: "
        "CASSINI brought to 0 what the baseline had X of (an infinite ratio).</p>",
        _table(["pair", *(labels[m] for m in metrics)], rows, "ratios"),
    ]


def _busiest_section(busiest: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """Per scheme, the table of its busiest links."""
    parts = ["<h2>Busiest links</h2>"]
    for name, table in busiest.items():
        rows = [
            f'<tr data-scheme="{html.escape(name)}" data-link="{html.escape(r["link"])}">'
            + _cell(r["link"] + (f" ({r['host']})" if r.get("host") else ""))
            + "".join(
                _cell(r[k], k)
                for k in ("capacity_gbps", "mean_utilisation", "peak_utilisation", "excess_s")
            )
            + "</tr>"
            for r in table
        ]
        parts += [
            f"<h3>{html.escape(name)}</h3>",
            _table(
                [
                    "link (host)",
                    "capacity (Gbit/s, one link)",
                    "mean utilisation",
                    "peak utilisation (bin)",
                    f"{EXCESS_LABEL} ({EXCESS_UNIT})",
                ],
                rows,
                f"links-{html.escape(name)}",
            ),
        ]
    return parts


def _poisson_rows(p: Mapping[str, Any]) -> dict[str, str]:
    """A drawn workload's parameters as the workload table shows them."""
    weights = {int(g): float(w) for g, w in p.get("gpus", {}).items()}
    total = sum(weights.values()) or 1.0
    mix = ", ".join(
        f"{g} GPU{'s' if g != 1 else ''}: {100 * w / total:.3g} %"
        for g, w in sorted(weights.items())
    )
    rows = {
        "arrivals": "Poisson",
        "jobs": number(p.get("jobs")),
        "load": number(p.get("load")),
        "GPUs per job": mix,
    }
    if "iterations" in p:
        lo, hi = p["iterations"]
        rows["iterations per job"] = f"{number(lo)}–{number(hi)}"
    rows["models"] = text(p["models"]) if p.get("models") else "every model of the library"
    return rows


def _setup_section(data: Mapping[str, Any], notes: Sequence[str]) -> list[str]:
    """The cluster, the workload (a trace's summary, or a drawn workload's parameters)
    and every note on how the workload was read."""
    parts = ["<h2>Cluster and workload</h2>"]
    cluster = data.get("cluster", {})
    parts.append(
        _table(
            ["cluster", "value"],
            [f"<tr>{_cell(k)}{_cell(v, k)}</tr>" for k, v in cluster.items()],
            "cluster",
        )
    )
    workload = data.get("workload", {})
    if isinstance(workload.get("poisson"), Mapping):
        flat: Mapping[str, Any] = _poisson_rows(workload["poisson"])
    else:
        flat = {k: v for k, v in workload.items() if not isinstance(v, list | dict)}
    parts.append(
        _table(
            ["workload", "value"],
            [f"<tr>{_cell(k)}{_cell(v, k)}</tr>" for k, v in flat.items()],
            "workload",
        )
    )
    parts += _servers_table(data.get("servers", []))
    lists = [
        *(f"skipped {n}: {why}" for why, n in workload.get("skipped", {}).items()),
        *(f"bad row: {b}" for b in workload.get("bad_row_examples", [])),
        *(f"assumed: {a}" for a in workload.get("assumptions", [])),
        *notes,
    ]
    if lists:
        parts.append('<ul class="notes">' + "".join(
            f"<li>{html.escape(str(x))}</li>" for x in lists) + "</ul>")  # fmt: skip
    return parts


def _servers_table(servers: Sequence[Mapping[str, Any]]) -> list[str]:
    """Which server is which (results.json's ``servers``): index (as placements and
    ``srv<i>`` links name it), host, rack, pod, GPUs, links and their capacity; folded."""
    if not servers:
        return []
    keys = ("index", "host", "rack", "pod", "tors", "gpus", "links")
    rows = [
        f'<tr data-server="{s["index"]}">'
        + "".join(_cell(s[k], k) for k in keys)
        + _cell(s["link_bps"] / 1e9, "link_gbps")
        + "</tr>"
        for s in servers
    ]
    head = ["server", "host", "rack", "pod", "ToR", "GPUs", "links", "Gbit/s (one link)"]
    return [
        f"<details><summary>Servers ({len(servers)}): index, host, rack</summary>",
        _table(head, rows, "servers"),
        "</details>",
    ]


def _routing(data: Mapping[str, Any]) -> str | None:
    """The config's routing, said to be the default, and each scheme that ran another."""
    default = data.get("settings", {}).get("routing")
    if default is None:
        return None
    by_scheme = data.get("routing_by_scheme", {})
    own = {name: r for name, r in by_scheme.items() if r is not None and r != default}
    return f"{default} (the config's default)" + "".join(
        f"; {name}: {r}" for name, r in own.items()
    )


def _settings_lines(data: Mapping[str, Any]) -> list[str]:
    """Under the title: where the run came from (config file, seed, candidate
    placements), the network settings it resolved (which model ran, with what; the
    routing per scheme where it is not the config's) and a line per setting the config
    gave that no scheduler used."""
    settings = {k: data[k] for k in ("config", "seed", "candidates") if data.get(k) is not None}
    settings |= dict(data.get("settings", {}))
    if "profiles" in data:
        settings["profiles"] = data["profiles"]
    routing = _routing(data)
    if routing is not None:
        settings["routing"] = routing
    parts = []
    if settings:
        cells = " · ".join(
            f'<span data-key="{html.escape(k)}">{html.escape(k)}: {html.escape(_setting(v))}</span>'
            for k, v in settings.items()
        )
        parts.append(f'<p id="settings">{cells}</p>')
    parts += [f'<p class="warning">{html.escape(w)}</p>' for w in data.get("warnings", [])]
    return parts


def _setting(value: Any) -> str:
    return "{" + text(value) + "}" if isinstance(value, Mapping) else text(value)


def write(
    path: Path,
    data: Mapping[str, Any],
    pictures: Sequence[tuple[Path, str]],
    busiest: Mapping[str, Sequence[Mapping[str, Any]]],
    notes: Sequence[str] = (),
) -> Path:
    """Write the page.  ``data``: the run's results.json; ``pictures``: (PNG, caption);
    ``busiest``: per scheme, rows of the busiest-links table."""
    parts = [
        f"<h1>Simulation report: {html.escape(str(data.get('name', 'sim')))}</h1>",
        *_settings_lines(data),
        *_summary_section(data),
        "<h2>Pictures</h2>",
        *(_figure(p, caption) for p, caption in pictures),
        *_busiest_section(busiest),
        *_setup_section(data, notes),
    ]
    body = "\n".join(parts)
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(str(data.get('name', 'sim')))}: simulation report</title>"
        f"<style>{STYLE}</style><script>{SCRIPT}</script></head>\n<body>\n{body}\n</body></html>\n"
    )
    path.write_text(page)
    return path
