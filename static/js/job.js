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

  // Live updates pushed by the watcher over a websocket: new log output is appended as it is
  // written, a state change refreshes the status panel. Polling stays as the fallback.
  const logs = document.getElementById("logs");
  function connect(delay) {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${scheme}://${location.host}${logs.dataset.ws}`);
    ws.onopen = () => { document.body.dataset.live = "open"; delay = 1000; };
    ws.onclose = () => {
      document.body.dataset.live = "closed";
      setTimeout(() => connect(Math.min(delay * 2, 30000)), delay);
    };
    ws.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      if (msg.type === "job") {
        const status = document.getElementById("status");
        if (status && window.htmx) htmx.trigger(status, "jobchanged");
      } else if (msg.type === "log_notice") {
        const notice = document.querySelector(`p.log-notice[data-replica="${msg.replica}"]`);
        if (notice) {
          notice.textContent = msg.notice;
          notice.hidden = !msg.notice;
        }
      } else if (msg.type === "log") {
        const pre = document.querySelector(`pre.log[data-replica="${msg.replica}"]`);
        // Append only what continues exactly where the panel ends; a gap is filled by the next poll.
        if (pre && Number(pre.dataset.next) === msg.offset) {
          pre.append(msg.text);
          pre.dataset.next = msg.next_offset;
          pre.scrollTop = pre.scrollHeight;
        }
      }
    };
  }
  if (logs && logs.dataset.ws) connect(1000);
  // Logs show their newest lines: keep the log panel scrolled to the end after each refresh.
  document.body.addEventListener("htmx:afterSwap", () => {
    document.querySelectorAll("pre.log").forEach((pre) => { pre.scrollTop = pre.scrollHeight; });
  });
})();
