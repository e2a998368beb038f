// Metric charts (the job page's trainers, the runs page's overlay): any metric, against step,
// wall time or time since the run began; each run's raw curve faint under its smoothed one
// (TensorBoard's debiased exponential moving average); a log scale; the data as CSV.
(function () {
  const COLORS = ["#2453d4", "#d97706", "#15803d", "#b42318", "#7c3aed", "#0891b2", "#be185d", "#4d7c0f",
                  "#9a3412", "#334155"];
  const NOT_METRICS = ["step", "pass", "wall"];

  // TensorBoard's smoothing: an EMA started at 0 and divided by (1 - weight^n), so the first
  // points are not pulled towards 0 (nor held at the first value). Gaps stay gaps.
  function smooth(values, weight) {
    if (!weight) return values.slice();
    let last = 0, n = 0;
    return values.map((v) => {
      if (v === null || v === undefined || !Number.isFinite(v)) return v;
      last = last * weight + (1 - weight) * v;
      n += 1;
      return last / (weight === 1 ? 1 : 1 - Math.pow(weight, n));
    });
  }

  // One run's points as [x, y] for the chosen metric and x axis, in x order.
  function points(run, metric, axis) {
    const ys = run.series[metric] || [];
    const steps = run.series.step || [], walls = run.series.wall || [];
    const start = walls.find((w) => w !== null && w !== undefined);
    const out = [];
    ys.forEach((y, i) => {
      const x = axis === "step" ? steps[i] : axis === "wall" ? walls[i] : (walls[i] == null ? null : walls[i] - start);
      if (x !== null && x !== undefined && y !== null && y !== undefined) out.push([x, y]);
    });
    return out.sort((a, b) => a[0] - b[0]);
  }

  // uPlot's columns: the union of x values; per run its raw and its smoothed values there.
  function columns(runs, metric, axis, weight, log) {
    const per = runs.map((run) => points(run, metric, axis));
    const xs = [...new Set(per.flatMap((p) => p.map(([x]) => x)))].sort((a, b) => a - b);
    const cols = [xs];
    per.forEach((p) => {
      const raw = p.map(([, y]) => (log && y <= 0 ? null : y));  // a log scale has no place for <= 0
      const smoothed = smooth(raw, weight);
      const at = new Map(p.map(([x], i) => [x, i]));
      cols.push(xs.map((x) => (at.has(x) ? raw[at.get(x)] : undefined)));
      cols.push(xs.map((x) => (at.has(x) ? smoothed[at.get(x)] : undefined)));
    });
    return cols;
  }

  function duration(seconds) {
    const s = Math.round(seconds), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    return h ? `${h}h${String(m).padStart(2, "0")}m` : m ? `${m}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
  }

  function metricsOf(runs) {
    const names = new Set(runs.flatMap((run) => Object.keys(run.series)));
    return [...names].filter((n) => !NOT_METRICS.includes(n)).sort((a, b) => (a === "loss" ? -1 : b === "loss" ? 1 : a.localeCompare(b)));
  }

  function csv(runs, metric, weight) {
    const rows = [["run", "step", "wall_time", "seconds_since_start", metric, `${metric}_smoothed`]];
    runs.forEach((run) => {
      const steps = run.series.step || [], walls = run.series.wall || [], ys = run.series[metric] || [];
      const start = walls.find((w) => w !== null && w !== undefined);
      const smoothed = smooth(ys.map((y) => (y === undefined ? null : y)), weight);
      ys.forEach((y, i) => {
        if (y === null || y === undefined) return;
        const wall = walls[i];
        rows.push([run.label, steps[i], wall == null ? "" : new Date(wall * 1000).toISOString(),
                   wall == null ? "" : (wall - start).toFixed(3), y, smoothed[i]]);
      });
    });
    return rows.map((r) => r.map((c) => (/[",\n]/.test(String(c)) ? `"${String(c).replace(/"/g, '""')}"` : c)).join(",")).join("\n") + "\n";
  }

  // A chart in `box` with its controls (found by id inside `root`); `load` resolves to the runs,
  // [{label, series: {step: [], wall: [], <metric>: []}}]; `active` keeps reloading every 3 s.
  function mount(root, box, load, active, filename) {
    const $ = (id) => root.querySelector(`#${id}`);
    const metricSelect = $("chart-metric"), axisSelect = $("chart-x"), smoothing = $("chart-smooth");
    const logScale = $("chart-log"), csvButton = $("chart-csv"), smoothValue = $("chart-smooth-value");
    let runs = [], plot = null, key = "";

    function options() {
      return { metric: metricSelect && metricSelect.value, axis: axisSelect ? axisSelect.value : "step",
               weight: Number(smoothing ? smoothing.value : 0), log: !!(logScale && logScale.checked) };
    }

    function draw() {
      const o = options();
      if (!runs.length || !o.metric) return;
      const data = columns(runs, o.metric, o.axis, o.weight, o.log);
      const k = [runs.map((r) => r.label).join(","), o.metric, o.axis, o.log].join("|");
      if (plot && k === key) { plot.setData(data); return; }
      key = k;
      box.innerHTML = "";
      const series = [{ label: o.axis }];
      runs.forEach((run, i) => {
        const color = COLORS[i % COLORS.length];
        series.push({ label: `${run.label} (raw)`, stroke: color + "40", width: 1, spanGaps: true, show: true });
        series.push({ label: run.label, stroke: color, width: 2, spanGaps: true });
      });
      const x = o.axis === "wall" ? {} : {
        label: o.axis === "step" ? "step" : "time since start",
        values: (u, ticks) => ticks.map((v) => (o.axis === "step" ? (Number.isInteger(v) ? String(v) : "") : duration(v))),
      };
      plot = new uPlot({
        width: Math.max(200, box.clientWidth - 16), height: 280,
        scales: { x: { time: o.axis === "wall" }, y: o.log ? { distr: 3 } : {} },
        axes: [x, { label: o.metric }], series,
        legend: { markers: { width: 2 } },
      }, data, box);
      box.plot = plot;
    }

    async function refresh() {
      runs = await load();
      const names = metricsOf(runs);
      if (metricSelect) {
        const chosen = metricSelect.value;
        const have = [...metricSelect.options].map((o) => o.value).join(",");
        if (have !== names.join(",")) {
          metricSelect.replaceChildren(...names.map((n) => new Option(n, n)));
          metricSelect.value = names.includes(chosen) ? chosen : names[0] || "";
        }
      }
      draw();
    }

    [metricSelect, axisSelect, logScale].forEach((el) => el && el.addEventListener("change", draw));
    if (smoothing) smoothing.addEventListener("input", () => {
      if (smoothValue) smoothValue.textContent = Number(smoothing.value).toFixed(2);
      draw();
    });
    if (csvButton) csvButton.addEventListener("click", () => {
      const o = options();
      if (!runs.length || !o.metric) return;
      const link = document.createElement("a");
      link.href = URL.createObjectURL(new Blob([csv(runs, o.metric, o.weight)], { type: "text/csv" }));
      link.download = `${filename}-${o.metric}.csv`;
      document.body.append(link);
      link.click();
      link.remove();
    });
    const loop = () => {
      refresh().catch(() => {});
      if (active) setTimeout(loop, 3000);
    };
    loop();
  }

  async function fetchJSON(url) {
    const res = await fetch(url, { credentials: "same-origin" });
    return res.ok ? res.json() : { replicas: {} };
  }

  window.PaddleCharts = { smooth, csv, columns, mount };

  window.addEventListener("load", () => {
    const box = document.getElementById("chart");
    if (!box) return;
    const root = box.closest("section") || document;
    const compared = document.getElementById("compare-series");
    if (compared) {  // the runs page: each run's trainer-0
      const pairs = JSON.parse(compared.textContent);
      mount(root, box, async () => {
        const all = await Promise.all(pairs.map(([, url]) => fetchJSON(url)));
        return pairs.map(([label], i) => {
          const replicas = all[i].replicas || {};
          return { label, series: replicas["trainer-0"] || replicas[Object.keys(replicas)[0]] || {} };
        }).filter((run) => Object.keys(run.series).length);
      }, false, "runs");
    } else {  // the job page: each trainer
      mount(root, box, async () => {
        const replicas = (await fetchJSON(box.dataset.url)).replicas || {};
        return Object.keys(replicas).map((name) => ({ label: name, series: replicas[name] }));
      }, box.dataset.active === "1", box.dataset.job || "job");
    }
  });
})();
