"""Draws a Grafana dashboard's panels from a real Prometheus, as one PNG.

Not Grafana: every panel's own queries (its targets' `expr`, with the
template variables set to "All" and $__rate_interval to --rate-interval)
run through Prometheus's /api/v1/query_range over [--start, --end], and
the answers are drawn in the dashboard's layout (each panel's gridPos),
with its title, unit, stacking and legendFormat. Time series are lines
(stacked where the panel stacks), heatmaps are bucket-by-time heatmaps
(cumulative `le` buckets made per-bucket, as Grafana does), a stat panel
shows each series' last value, and a state timeline shows each series'
values as coloured bands through its value mappings. A panel whose
queries return nothing says "No data".

Called by docs/grafana/render.sh, which starts the canaries and the
Prometheus; run it alone against any Prometheus that scrapes
`stallscope watch`:

    python render.py --prometheus http://127.0.0.1:9090 --start EPOCH --end EPOCH \
        --dashboard docs/grafana/stallscope-canary.json --out example.png
"""

import argparse
import datetime as dt
import json
import math
import re
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import LinearSegmentedColormap  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

# Grafana's dark theme, roughly.
BG = "#111217"
PANEL = "#181b1f"
BORDER = "#2c3235"
TEXT = "#ccccdc"
DIM = "#8e8e9e"
GRID = "#25282c"
PALETTE = ["#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9", "#FADE2A", "#37872D", "#FF9830"]
NAMED = {"green": "#73BF69", "red": "#F2495C", "yellow": "#FADE2A", "orange": "#FF9830", "blue": "#5794F2"}
UTC = dt.timezone.utc


def substitute(expr, rate_interval):
    expr = expr.replace("$__rate_interval", rate_interval).replace("${__rate_interval}", rate_interval)
    return re.sub(r"\$\{?(site|provider)\}?", ".*", expr)


def legend(fmt, metric, expr):
    if not fmt:
        return expr if not metric else "{" + ", ".join(f'{k}="{v}"' for k, v in metric.items()) + "}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt)


class Prometheus:
    def __init__(self, base, start, end, step):
        self.base, self.start, self.end, self.step = base.rstrip("/"), start, end, step

    def get(self, path, **params):
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as response:
            body = json.load(response)
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def range(self, expr):
        """[(labels, [(epoch, value)])] of one query over the run."""
        data = self.get("/api/v1/query_range", query=expr, start=self.start, end=self.end, step=self.step)
        return [(s["metric"], [(float(t), float(v)) for t, v in s["values"]]) for s in data["result"]]


def seconds_text(v):
    a = abs(v)
    if a == 0:
        return "0 s"
    if a < 1e-3:
        return f"{v * 1e6:.3g} µs"
    if a < 1:
        return f"{v * 1e3:.3g} ms"
    if a < 60:
        return f"{v:.3g} s"
    return f"{v / 60:.3g} min"


def number_text(v):
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g} Mil"
    if a >= 1e3:
        return f"{v / 1e3:.3g} K"
    return f"{v:.3g}"


def unit_text(unit, v):
    if v is None or math.isnan(v):
        return "–"
    if unit == "percentunit":
        return f"{v * 100:.3g}%"
    if unit == "s":
        return seconds_text(v)
    if unit == "reqps":
        return f"{number_text(v)} req/s"
    return number_text(v)


def unit_of(panel, ref_id=None):
    """The panel's unit, or an override's for the target with this refId."""
    config = panel.get("fieldConfig") or {}
    unit = (config.get("defaults") or {}).get("unit", "short")
    for override in config.get("overrides", []):
        matcher = override.get("matcher", {})
        if matcher.get("id") == "byFrameRefID" and matcher.get("options") == ref_id:
            for prop in override.get("properties", []):
                if prop.get("id") == "unit":
                    unit = prop["value"]
    return unit


def series_of(prom, panel, rate_interval):
    """[(refId, name, [(epoch, value)])] of every target of the panel."""
    out = []
    for target in panel.get("targets", []):
        expr = substitute(target["expr"], rate_interval)
        for metric, values in prom.range(expr):
            values = [(t, v) for t, v in values if not math.isnan(v) and not math.isinf(v)]
            if values:
                out.append((target.get("refId"), legend(target.get("legendFormat"), metric, expr), values))
    return out


def to_dates(ts):
    return [dt.datetime.fromtimestamp(t, UTC) for t in ts]


def style_axes(ax, prom):
    ax.set_facecolor(PANEL)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.tick_params(colors=DIM, labelsize=7, length=0, pad=3)
    ax.grid(True, color=GRID, linewidth=0.8)
    ax.set_axisbelow(True)
    ax.set_xlim(dt.datetime.fromtimestamp(prom.start, UTC), dt.datetime.fromtimestamp(prom.end, UTC))
    ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=4, maxticks=7, tz=UTC))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=UTC))


def no_data(ax, why="No data"):
    ax.set_facecolor(PANEL)
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    ax.text(0.5, 0.5, why, color=DIM, ha="center", va="center", fontsize=10, transform=ax.transAxes, wrap=True)


def timeseries(ax, prom, panel, data):
    unit = unit_of(panel)
    stacked = ((panel.get("fieldConfig") or {}).get("defaults", {}).get("custom", {}).get("stacking", {})
               .get("mode", "none")) == "normal"
    style_axes(ax, prom)
    handles, labels = [], []
    grid = sorted({t for _, _, values in data for t, _ in values})
    base = {t: 0.0 for t in grid}
    for i, (ref, name, values) in enumerate(data):
        color = PALETTE[i % len(PALETTE)]
        # Earlier lines a little wider, so a line drawn over an equal one
        # still shows it.
        width = 2.6 - 1.4 * i / (len(data) - 1) if len(data) > 1 else 1.4
        ts = [t for t, _ in values]
        if stacked:
            lows = [base[t] for t in ts]
            highs = [base[t] + v for t, v in values]
            for t, high in zip(ts, highs):
                base[t] = high
            ax.fill_between(to_dates(ts), lows, highs, color=color, alpha=0.18, linewidth=0)
            line, = ax.plot(to_dates(ts), highs, color=color, linewidth=width)
        else:
            line, = ax.plot(to_dates(ts), [v for _, v in values], color=color, linewidth=width)
        handles.append(line)
        labels.append(name if unit_of(panel, ref) == unit else f"{name} ({unit_of(panel, ref)})")
    ax.margins(x=0, y=0.1)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=4))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: unit_text(unit, v)))
    return handles, labels


def heatmap(ax, prom, panel, data, fig):
    """Cumulative `le` buckets over time, made per-bucket, as cells."""
    unit = ((panel.get("options") or {}).get("yAxis") or {}).get("unit", "short")
    by_le = {}
    for _, name, values in data:
        by_le[name] = dict(values)
    les = sorted(by_le, key=lambda le: math.inf if le == "+Inf" else float(le))
    times = sorted({t for values in by_le.values() for t in values})
    cells = []  # per bucket row, per time column
    for j, le in enumerate(les):
        row = []
        for t in times:
            here = by_le[le].get(t, 0.0)
            below = by_le[les[j - 1]].get(t, 0.0) if j else 0.0
            row.append(max(0.0, here - below))
        cells.append(row)
    # Only the buckets that ever held something, and the rows around them.
    used = [j for j, row in enumerate(cells) if any(v > 0 for v in row)]
    if not used:
        return no_data(ax, "No data: every bucket is empty")
    lo, hi = max(0, used[0] - 1), min(len(les) - 1, used[-1] + 1)
    les, cells = les[lo:hi + 1], cells[lo:hi + 1]
    style_axes(ax, prom)
    ax.grid(False)
    peak = max(max(row) for row in cells)
    cmap = LinearSegmentedColormap.from_list("grafana", ["#3b1d0a", "#c4461a", "#ff9830", "#fce2b0"])
    step = prom.step
    for j, row in enumerate(cells):
        for t, v in zip(times, row):
            if v <= 0:
                continue
            x0 = mdates.date2num(dt.datetime.fromtimestamp(t - step, UTC))
            x1 = mdates.date2num(dt.datetime.fromtimestamp(t, UTC))
            ax.add_patch(Rectangle((x0, j + 0.06), x1 - x0, 0.88, color=cmap(v / peak), linewidth=0))
    ax.set_ylim(0, len(les))
    ax.set_yticks([j + 0.5 for j in range(len(les))])
    ax.set_yticklabels(["+Inf" if le == "+Inf" else "≤ " + unit_text(unit, float(le)) for le in les], fontsize=6.5)
    norm = matplotlib.colors.Normalize(0, peak)
    bar = fig.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, pad=0.01, fraction=0.025, aspect=12)
    bar.outline.set_visible(False)
    bar.ax.tick_params(colors=DIM, labelsize=6.5, length=0)
    bar.ax.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
    return [], []


def stat(ax, prom, panel, data):
    """Each series' last value, as Grafana's stat tiles."""
    ax.set_facecolor(PANEL)
    ax.axis("off")
    n = len(data)
    cols = min(n, 5)
    rows = math.ceil(n / cols)
    for i, (ref, name, values) in enumerate(sorted(data, key=lambda d: d[1])):
        r, c = divmod(i, cols)
        x0, y0, w, h = c / cols, 1 - (r + 1) / rows, 1 / cols, 1 / rows
        ax.add_patch(Rectangle((x0 + 0.006, y0 + 0.02), w - 0.012, h - 0.04, color="#1f2a22", transform=ax.transAxes))
        ax.text(x0 + w / 2, y0 + h * 0.72, name, color=TEXT, ha="center", va="center", fontsize=7,
                transform=ax.transAxes)
        ax.text(x0 + w / 2, y0 + h * 0.36, unit_text(unit_of(panel, ref), values[-1][1]), color=NAMED["green"],
                ha="center", va="center", fontsize=15, fontweight="bold", transform=ax.transAxes)
    return [], []


def state_timeline(ax, prom, panel, data):
    """Each series' values as bands, coloured and named by the panel's value mappings."""
    defaults = (panel.get("fieldConfig") or {}).get("defaults", {})
    mappings = {}
    for mapping in defaults.get("mappings", []):
        if mapping.get("type") == "value":
            for value, shown in mapping["options"].items():
                mappings[float(value)] = (shown.get("text", value), NAMED.get(shown.get("color"), shown.get("color")))
    style_axes(ax, prom)
    ax.grid(axis="y", visible=False)
    data = sorted(data, key=lambda d: d[1])
    step = prom.step
    for row, (_, name, values) in enumerate(data):
        y = len(data) - 1 - row
        run_start, run_value, last = None, None, None
        for t, v in values + [(math.inf, None)]:
            if run_value is not None and (v != run_value or t - last > 2 * step):
                color = mappings.get(run_value, (None, PALETTE[0]))[1]
                x0 = mdates.date2num(dt.datetime.fromtimestamp(run_start, UTC))
                x1 = mdates.date2num(dt.datetime.fromtimestamp(last + step, UTC))
                ax.add_patch(Rectangle((x0, y - 0.4), x1 - x0, 0.8, color=color, linewidth=0))
                run_start = None
            if v is not None and run_start is None:
                run_start = t
            run_value, last = v, t
    ax.set_ylim(-0.6, len(data) - 0.4)
    ax.set_yticks(range(len(data)))
    ax.set_yticklabels([name for _, name, _ in reversed(data)], fontsize=7.5, color=TEXT)
    handles = [Patch(color=color) for _, (_, color) in sorted(mappings.items())]
    labels = [text for _, (text, _) in sorted(mappings.items())]
    return handles, labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prometheus", required=True)
    parser.add_argument("--start", type=float, required=True)
    parser.add_argument("--end", type=float, required=True)
    parser.add_argument("--step", type=float, default=3)
    parser.add_argument("--rate-interval", default="30s")
    parser.add_argument("--dashboard", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--subtitle", default="")
    args = parser.parse_args()
    prom = Prometheus(args.prometheus, args.start, args.end, args.step)
    dashboard = json.load(open(args.dashboard))
    panels = dashboard["panels"]

    unit_px, width_px, header_px, footer_px, dpi = 36, 1500, 78, 40, 100
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    height_px = header_px + rows * unit_px + footer_px
    fig = plt.figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi, facecolor=BG)
    px = lambda x, y, w, h: (x / width_px, 1 - (y + h) / height_px, w / width_px, h / height_px)  # noqa: E731

    begin = dt.datetime.fromtimestamp(args.start, UTC)
    end = dt.datetime.fromtimestamp(args.end, UTC)
    fig.text(12 / width_px, 1 - 24 / height_px, dashboard.get("title", ""), color=TEXT, fontsize=15, va="center")
    fig.text(12 / width_px, 1 - 50 / height_px,
             f"site: All   provider: All   {begin:%Y-%m-%d %H:%M:%S} to {end:%H:%M:%S} UTC   "
             f"$__rate_interval = {args.rate_interval}, step {args.step:g} s",
             color=DIM, fontsize=8.5, va="center")
    fig.text(1 - 12 / width_px, 1 - 24 / height_px,
             "A rendered example, not a Grafana screenshot: the dashboard's own queries,",
             color=NAMED["yellow"], fontsize=9, ha="right", va="center")
    fig.text(1 - 12 / width_px, 1 - 42 / height_px,
             "run by a real Prometheus scraping real `stallscope watch` canaries (docs/grafana/render.sh)",
             color=NAMED["yellow"], fontsize=9, ha="right", va="center")
    if args.subtitle:
        fig.text(1 - 12 / width_px, 1 - 60 / height_px, args.subtitle, color=DIM, fontsize=8, ha="right", va="center")

    col = width_px / 24
    for panel in sorted(panels, key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"])):
        g = panel["gridPos"]
        x, y, w, h = g["x"] * col, header_px + g["y"] * unit_px, g["w"] * col, g["h"] * unit_px
        gap = 4
        frame = fig.add_axes(px(x + gap, y + gap, w - 2 * gap, h - 2 * gap))
        frame.set_xticks([])
        frame.set_yticks([])
        frame.set_facecolor(PANEL)
        for side in frame.spines.values():
            side.set_color(BORDER)
        frame.text(10 / (w - 2 * gap), 1 - 14 / (h - 2 * gap), panel["title"], color=TEXT, fontsize=9.5,
                   fontweight="bold", va="center", transform=frame.transAxes)
        data = series_of(prom, panel, args.rate_interval)
        kind = panel["type"]
        legend_px = 0 if kind in ("stat", "heatmap") else 16 * math.ceil(max(1, len(data)) / max(1, int(g["w"] / 3)))
        left = 64 if kind != "state-timeline" else 130
        right = 14 if kind != "heatmap" else 8
        top, bottom = 30, 28 + legend_px
        if kind == "stat":
            left, bottom = 10, 10
        ax = fig.add_axes(px(x + gap + left, y + gap + top, w - 2 * gap - left - right, h - 2 * gap - top - bottom))
        if not data:
            why = "No data"
            if kind == "state-timeline":
                why = "No data: no probe round (watch --probe) ran"
            no_data(ax, why)
            continue
        if kind == "timeseries":
            handles, labels = timeseries(ax, prom, panel, data)
        elif kind == "heatmap":
            handles, labels = heatmap(ax, prom, panel, data, fig)
        elif kind == "stat":
            handles, labels = stat(ax, prom, panel, data)
        elif kind == "state-timeline":
            handles, labels = state_timeline(ax, prom, panel, data)
        else:
            no_data(ax, f"panel type {kind} is not drawn here")
            continue
        if handles:
            ncol = max(1, int(g["w"] / 3))
            ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(0, -(22 / (h - 2 * gap - top - bottom))),
                      ncol=ncol, frameon=False, fontsize=7.5, labelcolor=TEXT, handlelength=1.4,
                      columnspacing=1.2, borderaxespad=0)

    alerts = prom.get("/api/v1/alerts")["alerts"]
    rules = [r for group in prom.get("/api/v1/rules")["groups"] for r in group["rules"] if r["type"] == "alerting"]
    states = ", ".join(f"{a['labels']['alertname']} ({a['state']}: {a['labels'].get('site', '')} "
                       f"{a['labels'].get('provider', '')})".replace(" )", ")") for a in alerts) or "none"
    fig.text(12 / width_px, footer_px * 0.7 / height_px,
             f"docs/prometheus/alerts.yml loaded: {len(rules)} alerting rules; pending or firing at the end: {states}",
             color=DIM, fontsize=8, va="center")
    fig.text(12 / width_px, footer_px * 0.3 / height_px,
             "(a stall or failure ratio alert fires after 15 minutes over its threshold; this run was shorter)",
             color=DIM, fontsize=8, va="center")
    fig.savefig(args.out, dpi=dpi, facecolor=BG)
    # 256 colours are plenty for flat panels and lines, and half the bytes.
    from PIL import Image

    Image.open(args.out).convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT).save(args.out, optimize=True)


if __name__ == "__main__":
    main()
