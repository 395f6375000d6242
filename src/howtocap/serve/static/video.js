"use strict";
// The video page: an SVG timeline of ASR lines vs LLM caption times vs aligned times.

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const videoId = decodeURIComponent(location.pathname.replace(/^\/video\//, ""));

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) {
    const title = document.createElementNS(SVG, "title");
    title.textContent = text;
    node.append(title);
  }
  return node;
}

function label(x, y, cls, text) {
  const node = svg("text", { x, y, class: cls });
  node.textContent = text;
  return node;
}

function seek(t) {
  const v = $("player");
  if (!v.getAttribute("src") || t === null) return;
  v.currentTime = t;
  v.play().catch(() => {});
}

function drawTimeline(data) {
  const box = $("timeline");
  const width = Math.max(box.clientWidth, 600);
  const lanes = [["ASR", 28], ["LLM", 78], ["aligned", 128]];
  const height = 160;
  const pad = 70;
  const dur = Math.max(data.duration, 1);
  const x = (t) => pad + (t / dur) * (width - pad - 10);
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                            "aria-label": "caption timeline" });
  for (const [name, y] of lanes) {
    root.append(label(4, y + 14, "lane", name));
    root.append(svg("line", { x1: pad, x2: width - 10, y1: y + 10, y2: y + 10, class: "axis" }));
  }
  for (let t = 0; t <= dur; t += dur > 120 ? 30 : 5) {
    root.append(svg("line", { x1: x(t), x2: x(t), y1: 18, y2: height - 8, class: "tick" }));
    if (x(t) < width - 40) root.append(label(x(t) + 2, 12, "ticklabel", fmtTime(t)));
  }
  for (const s of data.subtitles) {
    const r = svg("rect", { x: x(s.start), y: lanes[0][1], height: 20, rx: 3, class: "asr",
      width: Math.max(2, x(s.end) - x(s.start)) }, `${fmtTime(s.start)} ${s.text}`);
    r.addEventListener("click", () => seek(s.start));
    root.append(r);
  }
  data.captions.forEach((c, i) => {
    if (c.llm_start !== null) {
      const r = svg("rect", { x: x(c.llm_start), y: lanes[1][1], height: 20, rx: 3, class: "llm",
        width: Math.max(2, x(c.llm_end) - x(c.llm_start)) }, `#${i + 1} LLM: ${c.text}`);
      r.addEventListener("click", () => seek(c.llm_start));
      root.append(r);
    }
    if (c.start !== null) {
      if (c.llm_start !== null) {
        root.append(svg("line", { x1: x((c.llm_start + c.llm_end) / 2), y1: lanes[1][1] + 20,
          x2: x((c.start + c.end) / 2), y2: lanes[2][1], class: "shift" }));
      }
      // dropped captions: a thin bar under the lane, so they never hide a kept one
      const r = svg("rect", { x: x(c.start), y: lanes[2][1] + (c.kept ? 0 : 22),
        height: c.kept ? 20 : 6, rx: 3, class: c.kept ? "aligned" : "dropped",
        width: Math.max(2, x(c.end) - x(c.start)) },
        `#${i + 1} aligned (score ${c.score}): ${c.text}`);
      r.addEventListener("click", () => seek(c.start));
      root.append(r);
    }
  });
  const head = svg("line", { x1: pad, x2: pad, y1: 18, y2: height - 8, class: "playhead",
                             id: "playhead" });
  root.append(head);
  $("player").addEventListener("timeupdate", () => {
    const px = x($("player").currentTime);
    head.setAttribute("x1", px);
    head.setAttribute("x2", px);
  });
  box.replaceChildren(root);
}

function captionRows(data) {
  $("captions").replaceChildren(...data.captions.map((c, i) => el("tr",
    { class: c.kept === false ? "dropped" : null,
      onclick: () => seek(c.start !== null ? c.start : c.llm_start) },
    el("td", {}, String(i + 1)),
    el("td", {}, c.text),
    el("td", { class: "num" }, `${fmtTime(c.llm_start)}–${fmtTime(c.llm_end)}`),
    el("td", { class: "num" }, c.start === null ? "–" : `${fmtTime(c.start)}–${fmtTime(c.end)}`),
    el("td", { class: "num" }, c.score === null ? "–" : c.score.toFixed(3)))));
}

async function main() {
  $("title").textContent = videoId;
  document.title = `howtocap · ${videoId}`;
  try {
    const data = await getJSON("/api/videos/" + encodeURIComponent(videoId));
    if (data.media) $("player").setAttribute("src", data.media);
    else $("player-box").hidden = true;
    const t = new URLSearchParams(location.search).get("t");
    if (t !== null && data.media) {
      $("player").addEventListener("loadedmetadata", () => { $("player").currentTime = +t; },
                                   { once: true });
    }
    $("status").textContent = `${data.captions.length} captions · ${data.subtitles.length} ` +
      `subtitle lines · ${data.aligned ? "aligned" : "not aligned yet"}`;
    drawTimeline(data);
    captionRows(data);
  } catch (err) {
    $("status").textContent = err.message;
    $("status").className = "status error";
  }
}

main();
