// Building DOM nodes without innerHTML: every string from the server or a token is text, never markup.

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Text with `**marked**` runs shown as <mark>, as the search snippets mark the query's words. */
export function marked(text) {
  const parts = String(text).split(/\*\*(.+?)\*\*/g);
  return parts.map((part, index) => (index % 2 ? el("mark", {}, part) : document.createTextNode(part)));
}

export function rawJson(value, label = "Raw JSON") {
  return el("details", {}, el("summary", {}, label), el("pre", {}, JSON.stringify(value, null, 2)));
}

export function time(ms) {
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}
