"use strict";
// The search page: query -> /api/search -> result cards; a click plays the clip.

const $ = (id) => document.getElementById(id);
let clipEnd = null;

function resultCard(hit, rank) {
  const thumb = hit.thumbnail
    ? el("img", { class: "thumb", src: hit.thumbnail, alt: "", loading: "lazy" })
    : el("div", { class: "thumb none" }, "no video");
  const context = el("ul", { class: "context" },
    hit.context.map((line) => el("li", { class: line.in_clip ? "in" : null },
      el("span", { class: "t" }, fmtTime(line.start)), " ", line.text)));
  const moved = hit.orig_start !== null && Math.abs(hit.orig_start - hit.start) > 0.05
    ? el("span", { class: "moved", title: "the LLM's time before alignment" },
      `LLM ${fmtTime(hit.orig_start)}–${fmtTime(hit.orig_end)}`)
    : null;
  const card = el("li", { class: "card", tabindex: "0", "data-video": hit.video_id,
                          "data-start": hit.start },
    el("div", { class: "rank" }, String(rank)),
    thumb,
    el("div", { class: "body" },
      el("p", { class: "caption" }, hit.text),
      el("p", { class: "meta" },
        el("a", { href: videoPage(hit.video_id), class: "vid",
                  onclick: (e) => e.stopPropagation() }, hit.video_id),
        el("span", { class: "time" }, `${fmtTime(hit.start)}–${fmtTime(hit.end)}`),
        moved,
        el("span", { class: "score", title: "cosine similarity" }, hit.score.toFixed(3))),
      hit.context.length ? context : null));
  const open = () => play(hit);
  card.addEventListener("click", open);
  card.addEventListener("keydown", (e) => { if (e.key === "Enter") open(); });
  return card;
}

function play(hit) {
  const box = $("player-box");
  const video = $("player");
  if (!hit.media) { $("status").textContent = `${hit.video_id} has no video file`; return; }
  box.hidden = false;
  $("player-title").textContent = `${hit.video_id} · ${fmtTime(hit.start)}–${fmtTime(hit.end)}`;
  $("player-caption").textContent = hit.text;
  $("player-page").href = videoPage(hit.video_id);
  clipEnd = hit.end;
  const start = () => {
    video.currentTime = hit.start;
    video.play().catch(() => { /* autoplay may be refused; the controls remain */ });
  };
  if (video.getAttribute("src") !== hit.media) {
    video.setAttribute("src", hit.media);
    video.addEventListener("loadedmetadata", start, { once: true });
    video.load();
  } else {
    start();
  }
  box.scrollIntoView({ behavior: "smooth", block: "start" });
}

async function search(q, k, by) {
  const status = $("status");
  const results = $("results");
  status.textContent = "searching…";
  status.className = "status";
  try {
    const params = new URLSearchParams({ q, k, by });
    const data = await getJSON("/api/search?" + params);
    results.replaceChildren(...data.hits.map((h, i) => resultCard(h, i + 1)));
    status.textContent = data.hits.length
      ? `${data.hits.length} clips for “${data.query}” (${data.took_ms} ms)`
      : `no clips for “${data.query}”`;
    history.replaceState(null, "", "/?" + params);
  } catch (err) {
    results.replaceChildren();
    status.textContent = err.message;
    status.className = "status error";
  }
}

async function loadSide() {
  try {
    const info = await getJSON("/api/info");
    $("info").textContent = info.index
      ? `${info.index.n} clips · ${info.videos} videos · ${info.index.encoder}`
      : `${info.videos} videos · no index yet`;
    const videos = await getJSON("/api/videos");
    $("videos").replaceChildren(...videos.map((v) => el("li", {},
      el("a", { href: videoPage(v.video_id) }, v.video_id),
      el("span", { class: "n" }, ` ${v.n_captions} captions`))));
  } catch (err) {
    $("info").textContent = err.message;
  }
}

$("search-form").addEventListener("submit", (e) => {
  e.preventDefault();
  search($("q").value.trim(), $("k").value, $("by").value);
});
$("player-close").addEventListener("click", () => {
  $("player").pause();
  $("player-box").hidden = true;
});
$("player").addEventListener("timeupdate", () => {
  const v = $("player");
  if (clipEnd !== null && v.currentTime > clipEnd + 0.25) { v.pause(); clipEnd = null; }
});

const initial = new URLSearchParams(location.search);
if (initial.get("q")) {
  $("q").value = initial.get("q");
  if (initial.get("by")) $("by").value = initial.get("by");
  if (initial.get("k")) $("k").value = initial.get("k");
  search($("q").value, $("k").value, $("by").value);
}
loadSide();
