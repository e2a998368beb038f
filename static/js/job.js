// Loss curves on the job page: one line per trainer for the first metric after `step`.
(function () {
  const box = document.getElementById("chart");
  if (!box) return;
  let plot = null, lastKey = "";

  async function refresh() {
    const res = await fetch(box.dataset.url, { credentials: "same-origin" });
    if (!res.ok) return;
    const { replicas } = await res.json();
    const names = Object.keys(replicas);
    if (!names.length) return;
    const metric = Object.keys(replicas[names[0]]).find((k) => k !== "step") || "loss";
    const steps = [...new Set(names.flatMap((n) => replicas[n].step))].sort((a, b) => a - b);
    const data = [steps, ...names.map((n) => {
      const byStep = new Map(replicas[n].step.map((s, i) => [s, replicas[n][metric][i]]));
      return steps.map((s) => (byStep.has(s) ? byStep.get(s) : null));
    })];
    const key = names.join(",") + metric;
    if (!plot || key !== lastKey) {
      box.innerHTML = "";
      const colors = ["#2453d4", "#d97706", "#15803d", "#b42318", "#7c3aed", "#0891b2"];
      plot = new uPlot({
        width: box.clientWidth - 16, height: 260,
        scales: { x: { time: false } },
        axes: [{ label: "step" }, { label: metric }],
        series: [{ label: "step" }, ...names.map((n, i) => ({ label: `${n} ${metric}`, stroke: colors[i % colors.length], width: 2, spanGaps: true }))],
      }, data, box);
      lastKey = key;
    } else {
      plot.setData(data);
    }
  }

  function loop() {
    refresh().catch(() => {});
    if (box.dataset.active === "1") setTimeout(loop, 3000);
  }
  window.addEventListener("load", loop);
  // Logs show their newest lines: keep the log panel scrolled to the end after each refresh.
  document.body.addEventListener("htmx:afterSwap", () => {
    document.querySelectorAll("pre.log").forEach((pre) => { pre.scrollTop = pre.scrollHeight; });
  });
})();
