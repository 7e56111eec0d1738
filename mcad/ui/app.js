// The web view's script (mcad/ui/index.html), served as views/script of the visibility
// API. The page is at .../v1alpha1/views/page: "state" is the state beside it, and one
// AppWrapper's explanation is at ../namespaces/NS/explanations/NAME. Everything goes
// through the hub's API server, as the user whose credentials reach it (kubectl proxy),
// so the page shows what RBAC lets that user see. No inline script or style: the
// Content-Security-Policy allows neither, so sizes are set through the CSSOM.
"use strict";
const $ = (s) => document.querySelector(s);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({"&":"&amp;","<":"&lt;",
  ">":"&gt;","\"":"&quot;","'":"&#39;"}[c]));
const keyOf = (r) => `${r.metadata.namespace}/${r.metadata.name}`;
function ago(iso) {
  if (!iso) return "-";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  return s < 120 ? `${Math.round(s)}s` : s < 7200 ? `${Math.round(s / 60)}m`
       : s < 172800 ? `${Math.round(s / 3600)}h` : `${Math.round(s / 86400)}d`;
}
function until(iso) {
  if (!iso) return "-";
  const s = (Date.parse(iso) - Date.now()) / 1000;
  const at = new Date(iso).toISOString().slice(11, 16);
  if (s <= 0) return "now";
  return `in ${s < 120 ? Math.round(s) + "s" : s < 7200 ? Math.round(s / 60) + "m"
        : Math.round(s / 3600) + "h"} (${at} UTC)`;
}
function time(iso) { return iso ? new Date(iso).toISOString().slice(11, 19) + " UTC" : "-"; }
function gpus(amounts) {
  const names = Object.keys(amounts);
  const name = names.includes("nvidia.com/gpu") ? "nvidia.com/gpu" : names[0];
  return name ? [name, amounts[name]] : ["", 0];
}
function sized() {
  for (const el of document.querySelectorAll("[data-fill]")) {
    el.style.setProperty("--fill", `${el.dataset.fill}%`);
  }
  for (const el of document.querySelectorAll("[data-width]")) {
    el.style.width = `${el.dataset.width}%`;
  }
}
function draw(s) {
  $("#cycle").textContent = time(s.cycle);
  $("#planned").textContent = time(s.planned);
  $("#scope").textContent = s.scope.everything ? "" :
    `showing ${s.scope.namespaces.length ? "namespaces " + s.scope.namespaces.join(", ")
                                         : "no namespace of yours"}`;
  $("#queued").textContent = s.queue.length;
  $("#queue tbody").innerHTML = s.queue.length ? s.queue.map((r) => `
    <tr class="row" data-key="${esc(keyOf(r))}"><td>${r.position}</td><td>${esc(keyOf(r))}</td>
      <td>${r.priority}</td><td>${esc(r.demand)}</td><td>${ago(r.waitingSince)}</td>
      <td>${until(r.estimatedStart)}</td><td><span class="reason">${esc(r.reason)}</span></td></tr>
    <tr><td></td><td class="msg" colspan="6">${esc(r.message)}</td></tr>`).join("")
    : `<tr><td colspan="7" class="empty">nothing is waiting</td></tr>`;
  $("#nrunning").textContent = s.running.length;
  $("#running tbody").innerHTML = s.running.length ? s.running.map((r) => `
    <tr class="row" data-key="${esc(r.key)}"><td>${esc(r.key)}${r.draining ? " (leaving)" : ""}</td>
      <td>${esc(r.cluster)}</td><td>${esc(r.demand)}</td><td>${r.priority}</td>
      <td>${ago(r.dispatched)}</td></tr>`).join("")
    : `<tr><td colspan="5" class="empty">nothing runs</td></tr>`;
  $("#clusters").innerHTML = s.clusters.map((c) => `
    <div class="cluster"><div class="title"><b>${esc(c.name)}</b>
      <span>${c.ready ? "" : "not ready, "}${c.used} of ${c.gpus} GPUs in use</span></div>
      <div class="nodes">${c.nodes.map((n) => `<div class="node${n.ready ? "" : " down"}"
        title="${esc(n.name)}: ${n.used} of ${n.gpus} GPUs in use"
        data-fill="${n.gpus ? Math.round(100 * n.used / n.gpus) : 0}"></div>`).join("")}
      </div></div>`).join("") || `<p class="empty">no cluster registered</p>`;
  $("#quota tbody").innerHTML = s.quota.length ? s.quota.map((q) => {
    const [name, limit] = gpus(q.limit); const used = q.used[name] || 0;
    const share = limit ? Math.min(100, Math.round(100 * used / limit)) : 0;
    return `<tr><td>${esc(q.tree)}: ${esc(q.path)}</td><td>${used} / ${limit} ${esc(name)}</td>
      <td class="quota-bar"><div class="bar${used > limit ? " over" : ""}">
      <div data-width="${share}"></div></div></td></tr>`;
  }).join("") : `<tr><td colspan="3" class="empty">${s.scope.everything ? "no quota trees"
    : "no quota node of yours"}</td></tr>`;
  sized();
}
async function refresh() {
  try {
    const r = await fetch("state", {cache: "no-store"});
    const s = await r.json();
    if (!r.ok) throw new Error(s.message || r.status);
    draw(s);
    $("#status").textContent = "live"; $("#status").className = "";
  } catch (e) {
    $("#status").textContent = `not live: ${e.message}`; $("#status").className = "bad";
  }
}
async function open(key) {
  const [ns, name] = key.split("/");
  const r = await fetch(`../namespaces/${encodeURIComponent(ns)}/explanations/${encodeURIComponent(name)}`,
                        {cache: "no-store"});
  const d = await r.json();
  $("#body").innerHTML = !r.ok ? `<p>${esc(d.message)}</p>` : `
    <h2>${esc(d.key)}: ${esc(d.outcome)}${d.position ? `, position ${d.position}` : ""}</h2>
    <p>${esc(d.message)}</p>
    <p><b>Estimated start:</b> ${until(d.estimatedStart)}<br><span class="msg">${esc(d.estimateBasis)}</span></p>
    <h2>Checks</h2><ul>${d.checks.map((c) => `<li class="${c.ok ? "ok" : "no"}">${esc(c.step)}:
      ${esc(c.detail)}</li>`).join("")}</ul>
    <h2>Clusters</h2><ul>${d.clusters.map((c) => `<li class="${c.ok ? "ok" : "no"}">${esc(c.cluster)}:
      ${esc(c.detail)}</li>`).join("")}</ul>
    <h2>Conditions</h2><table><tr><th>type</th><th>status</th><th>reason</th><th>since</th></tr>
      ${d.conditions.map((c) => `<tr><td>${esc(c.type)}</td><td>${esc(c.status)}</td>
      <td>${esc(c.reason)}</td><td>${ago(c.lastTransitionTime)} ago</td></tr>`).join("")}</table>`;
  $("#detail").classList.add("open");
  location.hash = `#${key}`;
}
document.addEventListener("click", (e) => {
  const row = e.target.closest("tr.row");
  if (row) open(row.dataset.key);
});
$("#close").onclick = () => { $("#detail").classList.remove("open"); history.replaceState(null, "", "#"); };
refresh();
setInterval(refresh, 2000);
if (location.hash.length > 1) open(decodeURIComponent(location.hash.slice(1)));
