// Plain SVG charts (no library, so the page works offline): bars of lag per queue and a line of
// a group's total lag over the minutes the page has been watching.

const SVG = "http://www.w3.org/2000/svg";

function el(name, attrs = {}, text) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

// An axis of four round steps (1, 2 or 5 times a power of ten, at least 1: counts are whole).
function niceMax(value) {
  const raw = Math.max(value / 4, 1);
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].find((m) => m * power >= raw) * power;
  return step * 4;
}

function frame(width, height, max, pad) {
  const svg = el("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img" });
  const plotH = height - pad.top - pad.bottom;
  for (let i = 0; i <= 4; i++) {
    const y = pad.top + plotH - (plotH * i) / 4;
    svg.append(el("line", { x1: pad.left, x2: width - pad.right, y1: y, y2: y, class: "grid" }));
    const label = Math.round((max * i) / 4).toLocaleString();
    svg.append(el("text", { x: pad.left - 6, y: y + 4, class: "axis", "text-anchor": "end" }, label));
  }
  return svg;
}

export function barChart(rows, { width = 640, height = 220, title = "" } = {}) {
  const pad = { top: 40, right: 12, bottom: 28, left: 56 };
  const max = niceMax(Math.max(0, ...rows.map((r) => r.value)));
  const svg = frame(width, height, max, pad);
  svg.setAttribute("aria-label", title);
  svg.append(el("text", { x: pad.left, y: 20, class: "title" }, title));
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const slot = plotW / Math.max(rows.length, 1);
  rows.forEach((row, i) => {
    const h = (plotH * row.value) / max;
    const x = pad.left + i * slot + slot * 0.15;
    const bar = el("rect", { x, y: pad.top + plotH - h, width: slot * 0.7, height: h, class: "bar" });
    bar.append(el("title", {}, `${row.label}: ${row.value.toLocaleString()}`));
    svg.append(bar);
    svg.append(el("text", { x: x + slot * 0.35, y: height - 10, class: "axis", "text-anchor": "middle" }, row.label));
    if (row.value > 0) {
      svg.append(el("text", { x: x + slot * 0.35, y: pad.top + plotH - h - 4, class: "value", "text-anchor": "middle" }, row.value.toLocaleString()));
    }
  });
  return svg;
}

// points: [{t: epoch ms, value}], oldest first.
export function lineChart(points, { width = 640, height = 220, title = "" } = {}) {
  const pad = { top: 40, right: 12, bottom: 28, left: 56 };
  const max = niceMax(Math.max(0, ...points.map((p) => p.value)));
  const svg = frame(width, height, max, pad);
  svg.setAttribute("aria-label", title);
  svg.append(el("text", { x: pad.left, y: 20, class: "title" }, title));
  if (points.length === 0) return svg;
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const t0 = points[0].t;
  const span = Math.max(points[points.length - 1].t - t0, 1);
  const xy = points.map((p) => [
    pad.left + (points.length === 1 ? plotW : (plotW * (p.t - t0)) / span),
    pad.top + plotH - (plotH * p.value) / max,
  ]);
  const path = xy.map(([x, y], i) => `${i ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
  svg.append(el("path", { d: path, class: "line" }));
  for (const [x, y] of xy) svg.append(el("circle", { cx: x, cy: y, r: 2.5, class: "dot" }));
  const fmt = (t) => new Date(t).toISOString().slice(11, 19);
  svg.append(el("text", { x: pad.left, y: height - 10, class: "axis" }, fmt(t0)));
  svg.append(el("text", { x: width - pad.right, y: height - 10, class: "axis", "text-anchor": "end" }, fmt(points[points.length - 1].t)));
  return svg;
}
