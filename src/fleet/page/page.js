// The fleet page's script (src/fleet/page.rs): draws the tables from the page's JSON data.
// Data is set as text (textContent), never as HTML: host and guest names are the facts' own.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  window.addEventListener("error", (e) => {
    const box = $("errors");
    box.hidden = false;
    box.append(el("p", {}, "The page failed: " + e.message));
  });
  function el(tag, attrs, ...kids) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") n.className = v;
      else if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
      else if (v !== null && v !== undefined && v !== false) n.setAttribute(k, v === true ? "" : v);
    }
    for (const k of kids) if (k !== null && k !== undefined) n.append(k);
    return n;
  }

  const D = JSON.parse($("data").textContent);
  const H = D.hosts.length, G = D.guests.length, K = D.kinds.length;
  const kindOf = D.hosts.map((h) => h.kind);
  const kindSize = D.kinds.map((k) => k.length);
  const guestsOn = D.hosts.map(() => []);
  D.guests.forEach((g, i) => { if (g.h !== null) guestsOn[g.h].push(i); });
  const VERDICT = { r: "runs", c: "cannot", n: "not-compared" };
  // A guest's state in virsh domstate's words (the data keeps the JSON views' `shutoff`).
  const STATE = { running: "running", shutoff: "shut off" };
  const stateOf = (guest) => STATE[guest.s] || guest.s;

  // A guest's verdict on host h: its own host's is `o` (nothing migrates there).
  const at = (g, h) => (D.guests[g].h === h ? D.guests[g].o : D.guests[g].v[kindOf[h]]);
  // Per guest: the hosts that run it, that were not compared, and the same apart from its own.
  const fig = D.guests.map((g) => {
    let runs = 0, nc = 0;
    for (let k = 0; k < K; k++) {
      if (g.v[k] === "r") runs += kindSize[k];
      else if (g.v[k] === "n") nc += kindSize[k];
    }
    let elseRuns = runs, elseNc = nc;
    if (g.h !== null) {
      const k = g.v[kindOf[g.h]];
      if (k === "r") elseRuns--; else if (k === "n") elseNc--;
      runs = elseRuns + (g.o === "r" ? 1 : 0);
      nc = elseNc + (g.o === "n" ? 1 : 0);
    }
    // A guest of a host without facts drains from no host of the fleet.
    const others = H - (g.h === null ? 0 : 1);
    const leave = g.h === null ? "elsewhere" : others === 0 ? "stays" : elseRuns > 0 ? "can" : elseNc > 0 ? "unknown" : "stuck";
    return { runs, nc, cannot: H - runs - nc, leave };
  });
  // Per host: the guests of the fleet it runs, was not compared with; its drain.
  const perKind = (letter) => {
    const c = new Array(K).fill(0);
    for (const g of D.guests) for (let k = 0; k < K; k++) if (g.v[k] === letter) c[k]++;
    return c;
  };
  const kindRuns = perKind("r"), kindNc = perKind("n");
  const hostFig = D.hosts.map((host, h) => {
    let runs = kindRuns[host.kind], nc = kindNc[host.kind];
    const drain = { can: 0, stuck: 0, unknown: 0 };
    for (const g of guestsOn[h]) {
      const v = D.guests[g].v[host.kind], o = D.guests[g].o;
      runs += (o === "r") - (v === "r");
      nc += (o === "n") - (v === "n");
      const l = fig[g].leave;
      if (l === "can") drain.can++; else if (l === "stuck") drain.stuck++; else if (l === "unknown") drain.unknown++;
    }
    return { runs, nc, cannot: G - runs - nc, drain };
  });

  const printable = [];
  const plural = (n, word) => n + " " + word + (n === 1 ? "" : "s");
  const some = (names, max) => names.length <= max ? names.join(", ") : names.slice(0, max).join(", ") + " and " + (names.length - max) + " more";

  // --- made from ---
  $("made").append("Made " + D.made.at + " by " + D.made.tool + " from " + plural(D.made.inputs.length, "input") + " (facts files and directories, cpu_maps).");
  $("inputs-summary").textContent = "The " + plural(D.made.inputs.length, "input");
  for (const i of D.made.inputs) $("inputs-list").append(el("li", { class: "code" }, i));

  // --- summary ---
  (function summary() {
    const dl = $("summary-list");
    const item = (id, term, value) => dl.append(el("dt", {}, term), el("dd", { id }, String(value)));
    item("sum-hosts", "Hosts", H);
    item("sum-guests", "Guests", G);
    item("sum-runs", "Guest × host pairs that run", D.pairs.runs);
    item("sum-cannot", "Pairs that cannot", D.pairs.cannot);
    item("sum-not-compared", "Pairs not compared (a fact missing)", D.pairs.not_compared);
    const known = D.hosts.filter((h) => h.level !== null);
    const order = ["below x86-64-v1", "x86-64-v1", "x86-64-v2", "x86-64-v3", "x86-64-v4"];
    if (known.length === 0) {
      item("sum-level", "The cluster's psABI level", "not known: no host's facts give its KVM host-model CPU (domcapabilities)");
    } else {
      const low = Math.min(...known.map((h) => order.indexOf(h.level)));
      const high = Math.max(...known.map((h) => order.indexOf(h.level)));
      let text = order[low] + " (what every host's KVM host-model CPU reaches";
      if (known.length < H) text += "; " + (H - known.length) + " host(s) not known";
      text += ")";
      item("sum-level", "The cluster's psABI level", text);
      const down = known.filter((h) => order.indexOf(h.level) === low).map((h) => h.name);
      const of = known.length < H ? " of the " + known.length + " whose level is known" : "";
      item("sum-holding", "Hosts that hold it down", high > low ? some(down, 20) : "none: every host" + of + " reaches it");
    }
    const stuck = fig.filter((f) => f.leave === "stuck").length;
    item("sum-stuck", "Guests that can go nowhere else", stuck);
    const unknownGuests = D.hosts.filter((h) => !h.guests_known).map((h) => h.name);
    if (unknownGuests.length) item("sum-guests-not-known", "Hosts whose guests are not known (no guest facts name them)", some(unknownGuests, 20));
    const elsewhere = D.guests.filter((g) => g.h === null).length;
    if (elsewhere) item("sum-elsewhere", "Guests of hosts without facts (judged on every host, drained from none)", elsewhere);
    const inc = D.incomplete;
    if (!inc.complete) {
      const why = [];
      for (const u of inc.unread) why.push("not read: " + u.file + " (" + u.error + ")");
      for (const u of inc.unknown_hosts) why.push(plural(u.guests, "guest") + " on host " + u.host + ", whose facts are not given");
      for (const h of inc.guests_not_known) why.push("the guests of " + h + " are not known");
      item("sum-incomplete", "Incomplete: the answers above could not take into account", why.join("; "));
      dl.lastChild.className = "cannot";
    }
  })();

  // --- pagers ---
  function pager(box, total, size, draw, label) {
    let first = 0;
    const show = () => {
      box.replaceChildren();
      if (total() > size) {
        const last = Math.min(first + size, total());
        box.append(
          el("button", { type: "button", disabled: first === 0, onclick: () => { first = Math.max(0, first - size); show(); } }, "◀ previous " + label),
          el("span", {}, (first + 1) + "–" + last + " of " + total() + " "),
          el("button", { type: "button", disabled: last >= total(), onclick: () => { first += size; show(); } }, "next " + label + " ▶"),
        );
      }
      draw(first, size);
    };
    show.reset = () => { first = 0; show(); };
    show.all = () => { box.replaceChildren(); draw(0, total()); };
    return show;
  }

  // --- matrix ---
  (function matrix() {
    const rows = D.hosts.map((_, h) => h).filter((h) => guestsOn[h].length > 0);
    const cols = D.hosts.map((_, h) => h);
    const counts = new Map(); // row host -> per kind: guests that run
    const rowCounts = (s) => {
      if (!counts.has(s)) {
        const r = new Array(K).fill(0), n = new Array(K).fill(0);
        let own = 0, ownNc = 0;
        for (const g of guestsOn[s]) {
          const v = D.guests[g].v;
          for (let k = 0; k < K; k++) { if (v[k] === "r") r[k]++; else if (v[k] === "n") n[k]++; }
          if (D.guests[g].o === "r") own++; else if (D.guests[g].o === "n") ownNc++;
        }
        counts.set(s, { r, n, own, ownNc });
      }
      return counts.get(s);
    };
    const cell = (s, d) => {
      const c = rowCounts(s);
      return s === d ? [c.own, c.ownNc] : [c.r[kindOf[d]], c.n[kindOf[d]]];
    };
    let c0 = 0;
    const SIZE = 25;
    const table = $("matrix");
    const draw = (r0) => {
      table.replaceChildren();
      const head = el("tr", {}, el("th", { scope: "col" }, "guests of ↓ on →"));
      for (const d of cols.slice(c0, c0 + SIZE)) head.append(el("th", { scope: "col" }, D.hosts[d].name));
      table.append(el("thead", {}, head));
      const body = el("tbody");
      for (const s of rows.slice(r0, r0 + SIZE)) {
        const tr = el("tr", {}, el("th", { scope: "row", class: "row" }, D.hosts[s].name + " (" + guestsOn[s].length + ")"));
        for (const d of cols.slice(c0, c0 + SIZE)) {
          const [runs, nc] = cell(s, d), all = guestsOn[s].length;
          const cls = runs === all ? "all" : nc > 0 ? "nc" : runs > 0 ? "some" : "none";
          const label = runs + " of " + all + " guests of " + D.hosts[s].name + " run on " + D.hosts[d].name + (nc ? ", " + nc + " not compared" : "");
          tr.append(el("td", {}, el("button", { type: "button", class: cls, "data-src": D.hosts[s].name, "data-dst": D.hosts[d].name, "aria-label": label, title: label, onclick: () => showCell(s, d) }, String(runs))));
        }
        body.append(tr);
      }
      table.append(body);
    };
    const rowPager = pager($("matrix-pager"), () => rows.length, SIZE, draw, "hosts (rows)");
    const colBox = el("span");
    $("matrix-pager").after(colBox);
    const colPager = pager(colBox, () => cols.length, SIZE, (first) => { c0 = first; rowPager(); }, "hosts (columns)");
    colPager();
    function showCell(s, d) {
      const box = $("cell");
      box.replaceChildren(el("h3", {}, "Guests of " + D.hosts[s].name + " on " + D.hosts[d].name));
      const list = el("ul");
      for (const g of guestsOn[s]) {
        const v = at(g, d);
        const item = el("li", {}, el("strong", {}, D.guests[g].n), " (" + stateOf(D.guests[g]) + "): ", el("span", { class: VERDICT[v] }, VERDICT[v]));
        if (v !== "r") item.append(reasonList(g, d));
        list.append(item);
      }
      box.append(list);
      box.focus();
    }
  })();

  // The reasons of guest g on host h: its own host's, else its class's in h's own words (the
  // data writes a host's facts file and name as markers).
  function reasonList(g, h) {
    const guest = D.guests[g];
    const ul = el("ul", { class: "reason" });
    const ids = guest.h === h ? guest.w || [] : guest.r[kindOf[h]];
    for (const r of ids) {
      const [code, message] = D.reasons[r];
      const words = message.split("\u0001facts\u0001").join(D.hosts[h].facts).split("\u0001host\u0001").join(D.hosts[h].name);
      ul.append(el("li", {}, el("span", { class: "code" }, "[" + code + "] "), words));
    }
    return ul;
  }
  const cpuOf = (g, h) => D.cpus[D.guests[g].c[kindOf[h]]];
  const levelText = (c) => c[2] !== null ? c[2] : (["model", "model and domcapabilities", "model and QEMU's KVM host CPU", "domcapabilities"].includes(c[3]) ? "below x86-64-v1" : "not known (" + c[3] + ")");
  const cpuText = (c) => (c[1] !== null ? c[1] : "not known") + " (" + (c[0] !== null ? c[0] : "no <cpu>") + ")";

  // --- hosts ---
  (function hosts() {
    const table = $("hosts");
    let shown = D.hosts.map((_, h) => h);
    const draw = (first, size) => {
      table.replaceChildren();
      table.append(el("thead", {}, el("tr", {}, ...["Host", "libvirt", "QEMU", "Kind", "Level", "Its guests", "Runs (of the fleet's guests)", "Cannot", "Not compared", "Drain"].map((t) => el("th", { scope: "col" }, t)))));
      const body = el("tbody");
      for (const h of shown.slice(first, first + size)) {
        const host = D.hosts[h], f = hostFig[h];
        const drain = !host.guests_known ? "its guests are not known" : guestsOn[h].length === 0 ? "no guests" :
          f.drain.can + " can leave, " + f.drain.stuck + " cannot" + (f.drain.unknown ? ", " + f.drain.unknown + " not known" : "");
        body.append(el("tr", { "data-host": host.name },
          el("th", { scope: "row" }, host.name), el("td", {}, host.libvirt || "not given"), el("td", {}, host.qemu || "not given"),
          el("td", { class: "num" }, String(host.kind)), el("td", {}, host.level || "not known"),
          el("td", { class: "num" }, host.guests_known ? String(guestsOn[h].length) : "not known"), el("td", { class: "num runs" }, String(f.runs)),
          el("td", { class: "num cannot" }, String(f.cannot)), el("td", { class: "num not-compared" }, String(f.nc)),
          el("td", { class: f.drain.stuck ? "cannot" : "" }, drain)));
      }
      table.append(body);
    };
    const show = pager($("hosts-pager"), () => shown.length, 100, draw, "hosts");
    printable.push(show);
    $("host-search").addEventListener("input", (e) => {
      const q = e.target.value.toLowerCase();
      shown = D.hosts.map((_, h) => h).filter((h) => D.hosts[h].name.toLowerCase().includes(q));
      show.reset();
    });
    show();
  })();

  // --- guests ---
  (function guests() {
    const codesOf = D.guests.map((g) => {
      const s = new Set();
      g.r.forEach((list) => list.forEach((r) => s.add(D.reasons[r][0])));
      return s;
    });
    const levelOf = D.guests.map((g, i) => (g.h === null ? null : levelText(cpuOf(i, g.h))));
    const options = (select, values, all) => {
      select.append(el("option", { value: "" }, all));
      for (const v of values) select.append(el("option", { value: v }, v));
    };
    const uniq = (xs) => [...new Set(xs.filter((x) => x !== null && x !== undefined))].sort();
    const hostName = (g) => (g.h !== null ? D.hosts[g.h].name : g.hn !== null ? g.hn : null);
    options($("f-host"), uniq(D.guests.map(hostName)), "every host");
    options($("f-verdict"), ["runs everywhere", "cannot somewhere", "not compared somewhere", "cannot leave its host"], "any verdict");
    options($("f-code"), uniq(D.reasons.map((r) => r[0])), "any reason");
    options($("f-os"), uniq(D.guests.map((g) => g.os)), "any OS");
    options($("f-level"), uniq(levelOf), "any level");
    let shown = D.guests.map((_, g) => g);
    const table = $("guests");
    const draw = (first, size) => {
      table.replaceChildren();
      table.append(el("thead", {}, el("tr", {}, ...["Guest", "Host", "State", "OS", "Level", "Runs on", "Cannot on", "Not compared on", "Reasons"].map((t) => el("th", { scope: "col" }, t)))));
      const body = el("tbody");
      for (const g of shown.slice(first, first + size)) {
        const guest = D.guests[g], f = fig[g];
        body.append(el("tr", { class: "pick", tabindex: "0", "data-guest": guest.n, onclick: () => showGuest(g), onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); showGuest(g); } } },
          el("th", { scope: "row" }, guest.n), el("td", {}, guest.h !== null ? D.hosts[guest.h].name : guest.hn !== null ? guest.hn + " (no facts)" : "not named"),
          el("td", {}, stateOf(guest)), el("td", {}, guest.os || ""), el("td", {}, levelOf[g] || ""),
          el("td", { class: "num runs" }, String(f.runs)), el("td", { class: "num cannot" }, String(f.cannot)),
          el("td", { class: "num not-compared" }, String(f.nc)), el("td", { class: "code" }, [...codesOf[g]].join(" "))));
      }
      table.append(body);
      $("guest-count").textContent = plural(shown.length, "guest") + " of " + G;
    };
    const show = pager($("guests-pager"), () => shown.length, 100, draw, "guests");
    printable.push(show);
    const filter = () => {
      const q = $("guest-search").value.toLowerCase(), host = $("f-host").value, verdict = $("f-verdict").value;
      const code = $("f-code").value, os = $("f-os").value, level = $("f-level").value;
      shown = D.guests.map((_, g) => g).filter((g) => {
        const guest = D.guests[g], f = fig[g];
        if (q && !guest.n.toLowerCase().includes(q)) return false;
        if (host && hostName(guest) !== host) return false;
        if (verdict === "runs everywhere" && f.runs !== H) return false;
        if (verdict === "cannot somewhere" && f.cannot === 0) return false;
        if (verdict === "not compared somewhere" && f.nc === 0) return false;
        if (verdict === "cannot leave its host" && f.leave !== "stuck") return false;
        if (code && !codesOf[g].has(code)) return false;
        if (os && guest.os !== os) return false;
        if (level && levelOf[g] !== level) return false;
        return true;
      });
      show.reset();
    };
    for (const id of ["guest-search", "f-host", "f-verdict", "f-code", "f-os", "f-level"]) $(id).addEventListener("input", filter);
    show();
    function showGuest(g, quiet) {
      const guest = D.guests[g], f = fig[g];
      const box = $("guest");
      const on = guest.h !== null ? D.hosts[guest.h].name : guest.hn !== null ? guest.hn + ", whose facts are not given" : "a host not named";
      history.replaceState(null, "", "#guest=" + encodeURIComponent(guest.n));
      box.replaceChildren(el("h3", {}, "Guest " + guest.n + " on " + on + " (" + stateOf(guest) + ")"),
        el("p", { id: "guest-figures" }, "runs on " + f.runs + " of " + H + " hosts, cannot on " + f.cannot + ", not compared on " + f.nc));
      const t = el("table", { id: "guest-hosts" }, el("thead", {}, el("tr", {}, ...["Host", "Verdict", "CPU there", "Level", "Reasons"].map((x) => el("th", { scope: "col" }, x)))));
      const body = el("tbody");
      for (let h = 0; h < H; h++) {
        const v = at(g, h), c = cpuOf(g, h);
        body.append(el("tr", { "data-host": D.hosts[h].name },
          el("th", { scope: "row" }, D.hosts[h].name + (guest.h === h ? " (its host)" : "")),
          el("td", { class: VERDICT[v] }, VERDICT[v]), el("td", {}, cpuText(c)), el("td", {}, levelText(c)),
          el("td", {}, v === "r" ? "" : reasonList(g, h))));
      }
      t.append(body);
      box.append(el("div", { class: "scroll" }, t));
      // Opened by the link (#guest=NAME): the page opens at its top, the guest's hosts below.
      if (!quiet) box.focus();
    }
    // #guest=NAME (percent-encoded, as the page writes it): that guest's hosts shown.
    if (location.hash.startsWith("#guest=")) {
      let want = location.hash.slice("#guest=".length);
      try { want = decodeURIComponent(want); } catch (e) { /* as written */ }
      const found = D.guests.map((x, i) => (x.n === want ? i : -1)).filter((i) => i >= 0);
      if (found.length === 0) {
        $("guest").replaceChildren(el("p", { class: "cannot" }, "No guest named " + want + " in this page."));
      } else {
        showGuest(found[0], true);
        if (found.length > 1) {
          $("guest").append(el("p", {}, "Also named " + want + ": the guests of " + found.slice(1).map((i) => hostName(D.guests[i]) || "a host not named").join(", ") + " (filter the table by that host)."));
        }
      }
    }
  })();

  // --- upgrade ---
  if (D.upgrade) {
    $("upgrade-section").hidden = false;
    $("upgrade-link").hidden = false;
    const u = D.upgrade, box = $("upgrade");
    box.append(el("p", {}, "Upgrade " + u.host + " to libvirt " + (u.to_libvirt || "(not given)") + " (" + u.to_facts + "): " + u.guests.filter((g) => g.verdict === "runs").length + " of " + u.guests.length + " guests run there as they are."));
    const t = el("table", { id: "upgrade-guests" }, el("thead", {}, el("tr", {}, ...["Guest", "Verdict", "Reasons", "Fix"].map((x) => el("th", { scope: "col" }, x)))));
    const body = el("tbody");
    for (const g of u.guests) {
      const ul = el("ul", { class: "reason" });
      for (const r of g.reasons) ul.append(el("li", {}, el("span", { class: "code" }, "[" + r.code + "] "), r.message));
      const fix = g.fix ? g.fix.changes.join("; ") + " (then: " + g.fix.verdict + ")" : g.verdict === "runs" ? "" : "the policy changes nothing here: fix it by hand";
      body.append(el("tr", { "data-guest": g.guest }, el("th", { scope: "row" }, g.guest), el("td", { class: g.verdict }, g.verdict), el("td", {}, ul),
        el("td", {}, fix)));
    }
    t.append(body);
    box.append(t);
  }
  // In print, the hosts' and guests' tables whole (the matrix as on screen: page through it).
  window.addEventListener("beforeprint", () => { for (const p of printable) p.all(); });
  window.addEventListener("afterprint", () => { for (const p of printable) p(); });

  // How long the script took to draw the page (ms since navigation start): docs/fleet.md.
  document.body.setAttribute("data-drawn-ms", String(Math.round(performance.now())));
  document.body.setAttribute("data-ready", "yes");
})();
