// The job page: the log panel's tools, and live updates over a websocket (charts: charts.js).
(function () {
  // ---- Log panel: tabs, search, follow, wrap.
  const logs = document.getElementById("logs");
  const search = document.getElementById("log-search");
  const matches = document.getElementById("log-matches");
  const follow = document.getElementById("log-follow");
  const wrap = document.getElementById("log-wrap");
  const download = document.getElementById("log-download");

  function escapeRegExp(s) { return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); }

  // Marks every match of the search box in the shown log; returns how many.
  function highlight() {
    const pre = document.querySelector("#log pre.log");
    if (!pre) return 0;
    const text = pre.textContent;
    const query = search ? search.value : "";
    if (!query) {
      if (pre.querySelector("mark")) pre.textContent = text;
      if (matches) matches.textContent = "";
      return 0;
    }
    const parts = text.split(new RegExp(`(${escapeRegExp(query)})`, "i"));
    const frag = document.createDocumentFragment();
    parts.forEach((part, i) => {
      if (i % 2) {
        const mark = document.createElement("mark");
        mark.textContent = part;
        frag.append(mark);
      } else if (part) {
        frag.append(part);
      }
    });
    pre.replaceChildren(frag);
    const found = (parts.length - 1) / 2;
    if (matches) matches.textContent = found === 1 ? "1 match" : `${found} matches`;
    return found;
  }

  function scrollLog() {
    const pre = document.querySelector("#log pre.log");
    if (!pre) return;
    const mark = search && search.value ? pre.querySelector("mark") : null;
    if (mark) {
      pre.scrollTop = mark.offsetTop - pre.offsetTop - 40;
    } else if (!follow || follow.checked) {
      pre.scrollTop = pre.scrollHeight;
    }
  }

  // The whole log is searched on the server (the panel holds only its last lines): Enter in the
  // search box, or the button; the numbered matching lines show above the panel.
  const searchAll = document.getElementById("log-search-all");
  const results = document.getElementById("log-results");
  function searchWholeLog() {
    if (!searchAll || !searchAll.dataset.url || !window.htmx) return;
    const q = search ? search.value : "";
    if (!q) { if (results) results.innerHTML = ""; return; }
    htmx.ajax("GET", `${searchAll.dataset.url}?q=${encodeURIComponent(q)}`, { target: "#log-results" });
  }
  let tabChosen = false;  // by the user: kept when the job's state changes
  function selectTab(tab) {
    logs.querySelectorAll(".tabs a").forEach((a) => a.classList.remove("current"));
    tab.classList.add("current");
    const merged = tab.dataset.log === "all";  // every log at once: no single file to fetch or search
    if (download) { download.hidden = merged; if (!merged) download.href = tab.dataset.download; }
    if (searchAll) { searchAll.hidden = merged; searchAll.dataset.url = tab.dataset.search || ""; }
    if (results) results.innerHTML = "";
  }
  if (logs) {
    logs.addEventListener("click", (event) => {
      const tab = event.target.closest(".tabs a");
      if (!tab) return;
      event.preventDefault();
      tabChosen = true;
      selectTab(tab);
    });
  }

  // The log tabs as the page would open now: a job that started since it was loaded has its
  // replicas' tabs, and, unless the user chose one, the tab the page opens first (trainer-0's
  // rather than the build's). Resolves once the tabs are current.
  async function refreshTabs() {
    const nav = logs && logs.querySelector("nav.tabs");
    if (!nav) return;
    const answer = await fetch(location.href, { credentials: "same-origin" });
    if (!answer.ok) return;
    const page = new DOMParser().parseFromString(await answer.text(), "text/html");
    const fresh = page.querySelector("#logs nav.tabs");
    if (!fresh) return;
    const names = (el) => [...el.querySelectorAll("a")].map((a) => a.dataset.log).join(" ");
    const chosen = nav.querySelector("a.current");
    if (names(fresh) !== names(nav)) {
      nav.replaceWith(fresh);
      htmx.process(fresh);
    }
    const keep = tabChosen && chosen && logs.querySelector(`.tabs a[data-log="${chosen.dataset.log}"]`);
    const first = fresh.querySelector("a.current");
    const tab = keep || (first && logs.querySelector(`.tabs a[data-log="${first.dataset.log}"]`));
    if (tab) selectTab(tab);
  }
  if (searchAll) searchAll.addEventListener("click", searchWholeLog);
  if (search) search.addEventListener("keydown", (event) => { if (event.key === "Enter") searchWholeLog(); });
  if (search) search.addEventListener("input", () => { highlight(); scrollLog(); if (!search.value && results) results.innerHTML = ""; });
  if (follow) follow.addEventListener("change", scrollLog);
  if (wrap && logs) {
    const apply = () => logs.classList.toggle("nowrap", !wrap.checked);
    wrap.addEventListener("change", apply);
    apply();
  }
  // Logs show their newest lines after each refresh; a user who stopped following keeps
  // the place they scrolled to.
  let kept = null;
  document.body.addEventListener("htmx:beforeSwap", () => {
    const pre = document.querySelector("#log pre.log");
    kept = pre ? { replica: pre.dataset.replica, top: pre.scrollTop } : null;
  });
  document.body.addEventListener("htmx:afterSwap", () => {
    highlight();
    const pre = document.querySelector("#log pre.log");
    if (pre && follow && !follow.checked && kept && kept.replica === pre.dataset.replica && !(search && search.value)) {
      pre.scrollTop = kept.top;
    } else {
      scrollLog();
    }
  });

  // ---- Live updates pushed by the watcher: new log output is appended as it is written, a
  // state change refreshes the status panel and the log panel's header. Polling stays as the
  // fallback. While the connection is down the page says so and reconnects with a backoff
  // capped at MAX_RETRY (a restarted server is back within seconds), or at once on "Retry now".
  const lost = document.getElementById("live-lost");
  const retryIn = document.getElementById("live-retry-in");
  const retryNow = document.getElementById("live-retry");
  const FIRST_RETRY = 500, MAX_RETRY = 4000;
  let retryDelay = FIRST_RETRY, retryTimer = null, countdown = null, socket = null, wasLost = false;

  // One refresh at a time: the changes that come meanwhile (a job's replicas change state
  // together) are shown by one more once it is done. The tabs are read again only when the job's
  // latest state is not the one they were made for (the state the server sends on connect is
  // usually the page's own).
  let refreshing = false, changedAgain = false, latestState = null, tabsState = logs && logs.dataset.state;
  function refreshPanels(state) {
    if (!window.htmx) return;
    if (state) latestState = state;
    if (refreshing) { changedAgain = true; return; }
    refreshing = true;
    const status = document.getElementById("status");
    if (status) htmx.trigger(status, "jobchanged");
    const reload = () => {
      const tab = logs && logs.querySelector(".tabs a.current");
      // From the tab, so its hx-sync holds: this reload and a click on a tab replace each other
      // (without a source, htmx.ajax synchronizes with nothing, and the slower answer won).
      if (tab) htmx.ajax("GET", tab.getAttribute("hx-get"), { source: tab, target: "#log" });
      refreshing = false;
      if (changedAgain) { changedAgain = false; refreshPanels(); }
    };
    if (!latestState || latestState === tabsState) { reload(); return; }
    const wanted = latestState;
    // the tab shown so far, if the page could not be had
    refreshTabs().then(() => { tabsState = wanted; }).then(reload, reload);
  }

  function stopWaiting() {
    clearTimeout(retryTimer);
    clearInterval(countdown);
    retryTimer = countdown = null;
  }

  function scheduleRetry() {
    stopWaiting();
    const at = Date.now() + retryDelay;
    const tick = () => { if (retryIn) retryIn.textContent = `in ${Math.max(0, Math.ceil((at - Date.now()) / 1000))} s`; };
    tick();
    countdown = setInterval(tick, 250);
    retryTimer = setTimeout(connect, retryDelay);
    retryDelay = Math.min(retryDelay * 2, MAX_RETRY);
  }

  function connect() {
    stopWaiting();
    if (socket) { const old = socket; socket = null; old.close(); }
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const ws = socket = new WebSocket(`${scheme}://${location.host}${logs.dataset.ws}`);
    ws.onopen = () => {
      document.body.dataset.live = "open";
      if (lost) lost.hidden = true;
      retryDelay = FIRST_RETRY;
      if (wasLost) refreshPanels();  // what changed while we were away was not pushed
      wasLost = false;
    };
    ws.onclose = () => {
      if (ws !== socket) return;  // replaced by "Retry now"
      document.body.dataset.live = "closed";
      if (lost) lost.hidden = false;
      wasLost = true;
      scheduleRetry();
    };
    ws.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      if (msg.type === "job") {
        refreshPanels(msg.state);
      } else if (msg.type === "log_notice") {
        const notice = document.querySelector(`p.log-notice[data-replica="${msg.replica}"]`);
        if (notice) {
          notice.textContent = msg.notice;
          notice.hidden = !msg.notice;
        }
      } else if (msg.type === "log") {
        const pre = document.querySelector(`pre.log[data-replica="${msg.replica}"]`);
        const text = pre && continuation(msg, Number(pre.dataset.next));
        if (text !== null) {
          pre.append(text);
          pre.dataset.next = msg.next_offset;
          if (search && search.value) highlight();
          scrollLog();
        }
      }
    };
  }
  if (retryNow) retryNow.addEventListener("click", () => { retryDelay = FIRST_RETRY; connect(); });
  // The part of a pushed log chunk that continues where the panel ends, or null. A chunk may
  // start before that end (a starting job's first lines are sent to everyone watching); offsets
  // count bytes, so the overlap is cut from the encoded text, when it encodes back to as many
  // bytes. A gap (or text that was not UTF-8) is filled by the next poll.
  function continuation(msg, next) {
    if (msg.offset === next) return msg.text;
    if (msg.offset > next || msg.next_offset <= next) return null;
    const bytes = new TextEncoder().encode(msg.text);
    if (bytes.length !== msg.next_offset - msg.offset) return null;
    return new TextDecoder().decode(bytes.subarray(next - msg.offset));
  }
  // Only once htmx has set the page up, on DOMContentLoaded (this deferred script runs first): a
  // reload issued before that is forgotten by the setup, so hx-sync cannot abort it when a tab is
  // clicked, and its late answer replaced the tab chosen.
  if (logs && logs.dataset.ws) {
    if (document.readyState === "complete") connect();
    else document.addEventListener("DOMContentLoaded", () => connect(), { once: true });
  }
})();
