"""``provision pd bench``'s outputs: ``bench.json`` and ``report.html``, a self-contained page (the plots are
PNG images inline as ``data:`` URIs, no script, no network) made with matplotlib: latency percentiles and
throughput against concurrency, TTFT against ITL, each run beside its baselines (``--compare``), the serving
path of every server and the SLO misses. Also the text forms the command prints (:func:`point_line`,
:func:`table`). matplotlib is imported only when a report is written.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .bench import miss_text, point_label
from .flags import PlanError

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _ms(value: Any) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _n(value: Any) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{value:,.1f}"


def point_line(point: Mapping[str, Any]) -> str:
    """``concurrency 4: TTFT p50/p99 12.1/30.2 ms, ITL p50/p99 1.5/2.0 ms, 1,234.5 out tok/s, 0 failed``."""
    if not point.get("ok", True) and "ttft_ms" not in point:
        return f"{point_label(point)}: FAILED: {str(point.get('error', '')).splitlines()[0][:200]}"
    t, i = point.get("ttft_ms") or {}, point.get("itl_ms") or {}
    return (f"{point_label(point)}: TTFT p50/p99 {_ms(t.get('p50'))}/{_ms(t.get('p99'))} ms, ITL p50/p99 "
            f"{_ms(i.get('p50'))}/{_ms(i.get('p99'))} ms, {_n(point.get('output_tps'))} out tok/s, "
            f"{_n(point.get('requests_per_s'))} req/s, {point.get('failures', '?')} failed")  # fmt: skip


COLUMNS = ("RUN", "POINT", "TTFT p50", "TTFT p90", "TTFT p99", "ITL p50", "ITL p99", "TPOT p50", "E2E p50",
           "E2E p99", "REQ/S", "IN TOK/S", "OUT TOK/S", "FAILED")  # fmt: skip


def rows(docs: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for doc in docs:
        for p in doc.get("points", []):
            t, i, tp, e = (p.get(k) or {} for k in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"))
            out.append((str(doc.get("label", doc.get("kind", "?"))), point_label(p), _ms(t.get("p50")),
                        _ms(t.get("p90")), _ms(t.get("p99")), _ms(i.get("p50")), _ms(i.get("p99")),
                        _ms(tp.get("p50")), _ms(e.get("p50")), _ms(e.get("p99")), _n(p.get("requests_per_s")),
                        _n(p.get("input_tps")), _n(p.get("output_tps")),
                        str(p.get("failures", "-")) if p.get("ok", True) else "ERROR"))  # fmt: skip
    return out


def table(docs: Sequence[Mapping[str, Any]]) -> str:
    """The points of every run as an aligned text table (latencies in ms)."""
    cells = [COLUMNS, *rows(docs)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells)


def load(path: Path) -> dict[str, Any]:
    """A bench.json written earlier (``--compare``): one line naming the file when it is not one."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PlanError(f"--compare {path}: not a bench.json ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("points"), list):
        raise PlanError(f"--compare {path}: not a bench.json (no 'points' list)")
    doc.setdefault("label", path.parent.name or path.stem)
    return doc


def _atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write(doc: dict[str, Any], out_dir: Path, baselines: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """bench.json (this run; its baselines' labels) and report.html (this run and its baselines) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {**doc, "compared_with": [b.get("label") for b in baselines]}
    bench = out_dir / "bench.json"
    _atomic(bench, (json.dumps(doc, indent=2, default=str) + "\n").encode())
    report = out_dir / "report.html"
    _atomic(report, render_html([doc, *baselines]).encode())
    return [str(bench), str(report)]


# --- the page -----------------------------------------------------------------------------------------------


def _series(doc: Mapping[str, Any], key: str, stat: str | None) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for p in doc.get("points", []):
        x = p.get("concurrency") if p.get("concurrency") is not None else p.get("request_rate")
        y = (p.get(key) or {}).get(stat) if stat else p.get(key)
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            xs.append(float(x))
            ys.append(float(y))
    return xs, ys


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def plots(docs: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(title, data URI) of each plot."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    out: list[tuple[str, str]] = []
    xlabel = "concurrency (or request rate)"
    for title, key, unit in (("Time to first token", "ttft_ms", "ms"), ("Inter-token latency", "itl_ms", "ms"),
                             ("End-to-end latency", "e2e_ms", "ms")):  # fmt: skip
        fig, ax = plt.subplots(figsize=(6.4, 3.8))
        for n, doc in enumerate(docs):
            colour = COLOURS[n % len(COLOURS)]
            for stat, style in (("p50", "-o"), ("p90", ":^"), ("p99", "--s")):
                xs, ys = _series(doc, key, stat)
                if xs:
                    ax.plot(xs, ys, style, color=colour, label=f"{doc.get('label', doc.get('kind'))} {stat}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(unit)
        ax.set_title(f"{title} (p50 / p90 / p99)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        out.append((title, _png(fig)))
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for n, doc in enumerate(docs):
        colour = COLOURS[n % len(COLOURS)]
        for key, style, what in (("output_tps", "-o", "output tok/s"), ("input_tps", ":^", "input tok/s")):
            xs, ys = _series(doc, key, None)
            if xs:
                ax.plot(xs, ys, style, color=colour, label=f"{doc.get('label', doc.get('kind'))} {what}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("tokens/s")
    ax.set_title("Throughput")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    out.append(("Throughput", _png(fig)))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for n, doc in enumerate(docs):
        _, ttft = _series(doc, "ttft_ms", "p99")
        xs, itl = _series(doc, "itl_ms", "p99")
        if ttft and len(ttft) == len(itl):
            ax.plot(itl, ttft, "-o", color=COLOURS[n % len(COLOURS)], label=str(doc.get("label", doc.get("kind"))))
            for x, i, t in zip(xs, itl, ttft, strict=True):
                ax.annotate(f"{x:g}", (i, t), fontsize=7, textcoords="offset points", xytext=(3, 3))
    ax.set_xlabel("ITL p99 (ms)")
    ax.set_ylabel("TTFT p99 (ms)")
    ax.set_title("TTFT vs ITL (p99; labels: concurrency)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    out.append(("TTFT vs ITL", _png(fig)))
    plt.close(fig)
    return out


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:13px;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f3f3f3}
td:first-child,td:nth-child(2){text-align:left}.warn{color:#b00}.plots img{max-width:48%;margin:4px}
code{background:#f6f6f6;padding:1px 4px}.note{color:#555;font-size:13px}"""


def render_html(docs: Sequence[Mapping[str, Any]]) -> str:
    """The whole page for the first doc (this run) and its baselines; every value escaped."""
    e = html.escape
    head = docs[0]
    names = ", ".join(str(d.get("label", d.get("kind"))) for d in docs)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>provision pd bench: "
             f"{e(str(head.get('label', '')))}</title><style>{_CSS}</style></head><body>",
             f"<h1>provision pd bench: {e(names)}</h1>"]  # fmt: skip
    ds = head.get("dataset") or {}
    parts.append(f"<p>Dataset: random token ids from the model's tokenizer, {e(str(ds.get('input_len')))} input / "
                 f"{e(str(ds.get('output_len')))} output tokens, {e(str(ds.get('num_prompts')))} prompts per point, "
                 f"{e(str(ds.get('warmup')))} warm-up request(s). Device: {e(str(head.get('device')))}. "
                 f"Measured by SGLang's own <code>bench_serving</code> on the router's host.</p>")  # fmt: skip
    if head.get("device") == "cpu":
        parts.append("<p class='note'>CPU mode: these numbers check the plumbing; they are not claims about "
                     "serving speed.</p>")  # fmt: skip
    misses = [m for d in docs[:1] for m in d.get("slo_misses", [])]
    if head.get("slo"):
        verdict = "all points meet them" if not misses else f"{len(misses)} miss(es)"
        parts.append(f"<h2>SLO: {e(', '.join(head['slo']))} — {e(verdict)}</h2>")
        parts += [f"<p class='warn'>{e(miss_text(m))}</p>" for m in misses]
    parts.append("<h2>Plots</h2><div class='plots'>")
    parts += [f"<img alt='{e(title)}' title='{e(title)}' src='{uri}'>" for title, uri in plots(docs)]
    parts.append("</div><h2>Points (latencies in ms)</h2><table><tr>")
    parts += [f"<th>{e(c)}</th>" for c in COLUMNS]
    parts.append("</tr>")
    for row in rows(docs):
        parts.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
    parts.append("</table>")
    for doc in docs:
        parts.append(f"<h2>{e(str(doc.get('label', doc.get('kind'))))}: {e(str(doc.get('kind')))} layout and "
                     f"serving path</h2>")  # fmt: skip
        versions = doc.get("versions") or {}
        parts.append("<p>Versions: " + e(", ".join(f"{k} {v}" for k, v in sorted(versions.items()))) + "</p>")
        heads = ("host", "role", "attention", "CUDA graphs", "sampling", "radix cache", "warm-up", "quantization",
                 "command")  # fmt: skip
        parts.append("<table><tr>" + "".join(f"<th>{h}</th>" for h in heads) + "</tr>")
        paths = doc.get("serving_path") or {}
        for proc in doc.get("layout", []):
            path = paths.get(proc.get("url"), {}) if proc.get("role") != "router" else {}
            cells = [proc.get("host"), proc.get("role"), path.get("attention", "-"), path.get("cuda_graph", "-"),
                     path.get("sampling", "-"), path.get("radix_cache", "-"), path.get("warmup", "-"),
                     path.get("quantization") or "-"]  # fmt: skip
            parts.append("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in cells)
                         + f"<td style='text-align:left'><code>{e(' '.join(map(str, proc.get('argv', []))))}</code>"
                         + "</td></tr>")  # fmt: skip
        parts.append("</table>")
        for url, path in paths.items():
            parts += [f"<p class='warn'>{e(url)}: {e(w)}</p>" for w in path.get("warnings", [])]
        commands = [p.get("argv") for p in doc.get("points", []) if p.get("argv")]
        if commands:
            parts.append(f"<p>Command of the first point: <code>{e(' '.join(map(str, commands[0])))}</code></p>")
    parts.append("</body></html>\n")
    return "".join(parts)
