// CPU and memory of each replica over time on the job page (samples from the watch loop).
(function () {
  const box = document.getElementById("usage-chart");
  if (!box) return;
  const colors = ["#2453d4", "#d97706", "#15803d", "#b42318", "#7c3aed", "#0891b2"];
  let plots = null, lastKey = "";

  // One time axis for all replicas: each replica's values placed at its own sample times. Where
  // a replica has no sample at another's time the value is undefined, which uPlot joins across;
  // null (the server's mark of a gap with no samples, e.g. while suspended) breaks the line.
  function align(replicas, names, field) {
    const times = [...new Set(names.flatMap((n) => replicas[n].time))].sort((a, b) => a - b);
    return [times, ...names.map((n) => {
      const at = new Map(replicas[n].time.map((t, i) => [t, replicas[n][field][i]]));
      return times.map((t) => at.get(t));
    })];
  }

  // A single sample still gets a readable time axis: a few minutes around it, not years (uPlot
  // pads a lone x value by 1000 days on each side).
  function fitTime(plot) {
    const times = plot.data[0];
    if (times.length === 1) plot.setScale("x", { min: times[0] - 150, max: times[0] + 150 });
  }

  function chart(names, label, data) {
    const div = document.createElement("div");
    box.append(div);
    return new uPlot({
      width: box.clientWidth - 16, height: 200,
      axes: [{}, { label }],
      series: [{}, ...names.map((n, i) => ({ label: n, stroke: colors[i % colors.length], width: 2, spanGaps: false,
                                            points: { show: data[0].length < 3 } }))],
    }, data, div);
  }

  async function refresh() {
    const res = await fetch(box.dataset.url, { credentials: "same-origin" });
    if (!res.ok) return;
    const { replicas } = await res.json();
    const names = Object.keys(replicas).filter((n) => replicas[n].time.length);
    if (!names.length) return;
    const cpu = align(replicas, names, "cpu"), memory = align(replicas, names, "memory");
    if (!plots || names.join(",") !== lastKey) {
      box.innerHTML = "";
      plots = box.plots = [chart(names, "CPU %", cpu), chart(names, "memory MiB", memory)];
      lastKey = names.join(",");
    } else {
      plots[0].setData(cpu);
      plots[1].setData(memory);
    }
    plots.forEach(fitTime);
  }

  function loop() {
    refresh().catch(() => {});
    if (box.dataset.active === "1") setTimeout(loop, 5000);
  }
  window.addEventListener("load", loop);
})();
