// Small DOM helpers: build elements without innerHTML, so message contents are never parsed
// as markup.

export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key in node && typeof value !== "string") node[key] = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// A table: columns are [heading, (row) => cell content, optional class].
export function table(columns, rows, { empty = "nothing here", rowAttrs } = {}) {
  if (rows.length === 0) return h("p", { class: "empty" }, empty);
  return h(
    "table",
    {},
    h("thead", {}, h("tr", {}, columns.map(([title, , cls]) => h("th", { class: cls }, title)))),
    h(
      "tbody",
      {},
      rows.map((row) =>
        h("tr", rowAttrs ? rowAttrs(row) : {}, columns.map(([, cell, cls]) => h("td", { class: cls }, cell(row)))),
      ),
    ),
  );
}

export function iso(ms) {
  if (ms === null || ms === undefined || ms === "") return "—";
  const date = new Date(Number(ms));
  return Number.isNaN(date.getTime()) ? String(ms) : date.toISOString().replace("T", " ").replace("Z", "");
}

export function num(value) {
  return value === null || value === undefined ? "—" : Number(value).toLocaleString("en-US");
}

export function badge(text, kind = text) {
  return h("span", { class: `badge ${String(kind).replace(/[^a-z_]/gi, "")}` }, text);
}

export function link(text, href) {
  return h("a", { href }, text);
}

export function hashFor(view, params = {}) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(key, String(value));
  }
  const text = search.toString();
  return `#/${view}${text ? `?${text}` : ""}`;
}
