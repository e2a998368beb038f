// File browser uploads: drag-and-drop (files and whole folders) or pickers, each file sent in
// chunks through the resumable /api/v2/uploads/ protocol with a progress bar. A dropped
// connection is retried from the server's offset; after a reload, choosing or dropping the same
// file again resumes it (upload ids are kept in localStorage, keyed by destination+size+mtime).
(function () {
  "use strict";
  const CHUNK = 8 * 1024 * 1024;
  const PARALLEL = 2;
  const STORE = "pfs-uploads";
  const root = document.getElementById("pfs");
  if (!root || root.dataset.writable !== "1") return;
  const api = root.dataset.api; // /api/v2/uploads/
  const list = document.getElementById("uploads");
  const csrf = (document.cookie.match(/(?:^|; )csrftoken=([^;]*)/) || [])[1] ||
    JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"];
  const queue = [];
  let running = 0;

  const saved = () => JSON.parse(localStorage.getItem(STORE) || "{}");
  const save = (key, value) => {
    const all = saved();
    if (value === undefined) delete all[key]; else all[key] = value;
    localStorage.setItem(STORE, JSON.stringify(all));
  };
  const human = (n) => {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + units[i];
  };
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  function row(dest, size) {
    const el = document.createElement("div");
    el.className = "upload";
    el.innerHTML = '<span class="name"></span><progress max="100" value="0"></progress>' +
      '<span class="status">waiting</span><button class="secondary small" type="button">Cancel</button>';
    el.querySelector(".name").textContent = dest;
    el.querySelector(".name").title = dest + " (" + human(size) + ")";
    list.appendChild(el);
    return el;
  }

  async function json(method, url, body) {
    const resp = await fetch(url, {
      method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf, Accept: "application/json" },
      body: body ? JSON.stringify(body) : undefined,
    });
    const data = resp.status === 204 ? {} : await resp.json().catch(() => ({}));
    return { status: resp.status, data };
  }

  // One PATCH with upload progress (fetch has no upload progress events).
  function patch(url, offset, blob, onProgress) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open("PATCH", url);
      xhr.setRequestHeader("Content-Type", "application/offset+octet-stream");
      xhr.setRequestHeader("Upload-Offset", String(offset));
      xhr.setRequestHeader("X-CSRFToken", csrf);
      xhr.upload.onprogress = (e) => onProgress(e.loaded);
      xhr.onload = () => {
        let data = {};
        try { data = JSON.parse(xhr.responseText); } catch (e) { /* empty body */ }
        resolve({ status: xhr.status, data });
      };
      xhr.onerror = () => reject(new Error("network error"));
      xhr.ontimeout = () => reject(new Error("timed out"));
      xhr.send(blob);
    });
  }

  async function upload(job) {
    const { file, dest, el } = job;
    const key = dest + "|" + file.size + "|" + file.lastModified;
    const bar = el.querySelector("progress");
    const status = el.querySelector(".status");
    const show = (done, text) => {
      bar.value = file.size ? (100 * done) / file.size : 100;
      status.textContent = text || (human(done) + " of " + human(file.size));
    };
    let id = saved()[key];
    let offset = 0;
    if (id) {
      const r = await json("GET", api + id + "/");
      if (r.status === 200 && !r.data.complete) { offset = r.data.offset; show(offset, "resuming at " + human(offset)); }
      else id = null;
    }
    if (!id) {
      const r = await json("POST", api, { path: dest, size: file.size, overwrite: true });
      if (r.status !== 201) throw new Error(r.data.detail || JSON.stringify(r.data));
      id = r.data.id;
      offset = r.data.offset;
      if (r.data.complete) return;
      save(key, id);
    }
    job.id = id;
    let failures = 0;
    const started = Date.now();
    const startOffset = offset;
    while (offset < file.size) {
      if (job.cancelled) return;
      const end = Math.min(file.size, offset + CHUNK);
      let r;
      try {
        r = await patch(api + id + "/", offset, file.slice(offset, end), (sent) => {
          const done = offset + sent;
          const rate = (done - startOffset) / Math.max(0.001, (Date.now() - started) / 1000);
          show(done, human(done) + " of " + human(file.size) + " · " + human(rate) + "/s");
        });
      } catch (e) {
        // Connection lost: wait, ask the server where we are, go on from there.
        failures++;
        const wait = Math.min(30, 2 ** Math.min(failures, 5));
        el.classList.add("waiting");
        for (let s = wait; s > 0 && !job.cancelled; s--) { status.textContent = "connection lost, retrying in " + s + "s"; await sleep(1000); }
        const h = await json("GET", api + id + "/").catch(() => null);
        if (h && h.status === 200) offset = h.data.offset;
        else if (h && h.status === 404) throw new Error("the upload expired: choose the file again");
        continue;
      }
      el.classList.remove("waiting");
      failures = 0;
      if (r.status === 200) {
        offset = r.data.offset;
        if (r.data.complete) break;
      } else if (r.status === 409 && typeof r.data.offset === "number") {
        offset = r.data.offset;
      } else {
        if (r.status === 404 || r.status === 410 || r.status === 422) save(key);
        throw new Error(r.data.detail || "HTTP " + r.status);
      }
    }
    save(key);
    show(file.size, "done");
  }

  function refresh() {
    const dir = root.dataset.dir;
    if (window.htmx) htmx.ajax("GET", root.dataset.listing + "?path=" + encodeURIComponent(dir), "#listing");
  }

  async function pump() {
    while (running < PARALLEL && queue.length) {
      const job = queue.shift();
      running++;
      job.el.querySelector(".status").textContent = "starting";
      upload(job).then(() => {
        job.el.classList.add("done");
        if (job.cancelled) job.el.querySelector(".status").textContent = "cancelled";
        job.el.querySelector("button").remove();
      }, (err) => {
        job.el.classList.add("failed");
        job.el.querySelector(".status").textContent = err.message;
      }).finally(() => {
        running--;
        if (!queue.length && !running) refresh();
        pump();
      });
    }
  }

  function add(file, relPath) {
    const dest = root.dataset.dir.replace(/\/+$/, "") + "/" + relPath.replace(/^\/+/, "");
    const el = row(dest, file.size);
    const job = { file, dest, el };
    el.querySelector("button").addEventListener("click", async () => {
      job.cancelled = true;
      const i = queue.indexOf(job);
      if (i >= 0) queue.splice(i, 1);
      if (job.id) await json("DELETE", api + job.id + "/");
      save(dest + "|" + file.size + "|" + file.lastModified);
      el.classList.add("done");
      el.querySelector(".status").textContent = "cancelled";
    });
    queue.push(job);
  }

  // Folders dropped: walk them with the entries API, keeping relative paths.
  async function walk(entry, prefix) {
    if (entry.isFile) {
      const file = await new Promise((res, rej) => entry.file(res, rej));
      add(file, prefix + file.name);
    } else if (entry.isDirectory) {
      const reader = entry.createReader();
      for (;;) {
        const batch = await new Promise((res, rej) => reader.readEntries(res, rej));
        if (!batch.length) break;
        for (const child of batch) await walk(child, prefix + entry.name + "/");
      }
    }
  }

  const zone = document.getElementById("dropzone");
  ["dragenter", "dragover"].forEach((t) => document.addEventListener(t, (e) => {
    e.preventDefault();
    zone.classList.add("over");
  }));
  ["dragleave", "drop"].forEach((t) => document.addEventListener(t, () => zone.classList.remove("over")));
  document.addEventListener("drop", async (e) => {
    e.preventDefault();
    const items = Array.from(e.dataTransfer.items || []);
    const entries = items.map((i) => i.webkitGetAsEntry && i.webkitGetAsEntry()).filter(Boolean);
    if (entries.length) for (const entry of entries) await walk(entry, "");
    else for (const f of e.dataTransfer.files) add(f, f.name);
    pump();
  });
  document.getElementById("pick-files").addEventListener("change", (e) => {
    for (const f of e.target.files) add(f, f.name);
    e.target.value = "";
    pump();
  });
  document.getElementById("pick-folder").addEventListener("change", (e) => {
    for (const f of e.target.files) add(f, f.webkitRelativePath || f.name);
    e.target.value = "";
    pump();
  });

  // Uploads interrupted by a reload: say so, so the user can pick the same files again.
  const pending = Object.keys(saved()).filter((k) => k.startsWith(root.dataset.dir.replace(/\/+$/, "") + "/"));
  if (pending.length) {
    const p = document.createElement("p");
    p.className = "flash";
    p.textContent = pending.length + " unfinished upload(s) here (" +
      pending.map((k) => k.split("|")[0].split("/").pop()).join(", ") +
      "): choose or drop the same files again to resume where they stopped.";
    list.appendChild(p);
  }
  window.pfsUploads = { add, pump, queue };
})();
