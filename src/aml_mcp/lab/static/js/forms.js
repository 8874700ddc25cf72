// Forms generated from JSON Schemas: a tool's `inputSchema`, or an elicitation's `requestedSchema`.

import { el } from "./dom.js";

let formCount = 0;

function kindOf(schema) {
  const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== "null") : schema.type;
  if (schema.enum) return "enum";
  return type || "string";
}

function field(prefix, name, schema, required) {
  const id = `${prefix}-${name}`;
  const kind = kindOf(schema);
  const label = `${schema.title || name}${required ? " (required)" : ""}`;
  const described = schema.description ? `${id}-help` : undefined;
  let control;
  if (kind === "enum") {
    control = el("select", { id, name, "aria-describedby": described },
      required ? null : el("option", { value: "" }, "—"),
      schema.enum.map((value) => el("option", { value: JSON.stringify(value) }, String(value))));
  } else if (kind === "boolean") {
    control = el("input", { id, name, type: "checkbox", "aria-describedby": described,
      checked: schema.default === true });
  } else if (kind === "integer" || kind === "number") {
    control = el("input", { id, name, type: "number", step: kind === "integer" ? "1" : "any",
      min: schema.minimum, max: schema.maximum, value: schema.default, required, "aria-describedby": described });
  } else if (kind === "array" || kind === "object") {
    control = el("textarea", { id, name, rows: 2, cols: 40, "aria-describedby": described,
      placeholder: kind === "array" ? "one per line, or a JSON array" : "a JSON object" },
      schema.default !== undefined ? JSON.stringify(schema.default) : "");
  } else {
    const format = schema.format === "date" ? "date" : "text";
    control = el("input", { id, name, type: format, value: schema.default, required,
      maxlength: schema.maxLength, "aria-describedby": described, autocomplete: "off" });
  }
  control.dataset.kind = kind;
  return el("div", { class: "field" },
    el("label", { for: id }, label),
    control,
    schema.description ? el("div", { id: described, class: "hint" }, schema.description) : null);
}

/** A form for `schema`; `onSubmit(values)` gets the arguments the schema describes. */
export function schemaForm(schema, submitLabel, onSubmit, extraButtons = []) {
  const prefix = `f${++formCount}`;
  const properties = schema?.properties || {};
  const required = new Set(schema?.required || []);
  const form = el("form", { class: "schema-form", novalidate: true },
    Object.entries(properties).map(([name, sub]) => field(prefix, name, sub, required.has(name))),
    el("div", { class: "buttons" }, el("button", { type: "submit", class: "primary" }, submitLabel), extraButtons));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    onSubmit(valuesOf(form, properties));
  });
  return form;
}

function valuesOf(form, properties) {
  const values = {};
  for (const [name] of Object.entries(properties)) {
    const control = form.elements.namedItem(name);
    const kind = control.dataset.kind;
    if (kind === "boolean") { values[name] = control.checked; continue; }
    const raw = control.value.trim();
    if (raw === "") continue;
    if (kind === "enum") values[name] = JSON.parse(raw);
    else if (kind === "integer" || kind === "number") values[name] = Number(raw);
    else if (kind === "array") values[name] = raw.startsWith("[") ? JSON.parse(raw) : raw.split(/\n|,/).map((s) => s.trim()).filter(Boolean);
    else if (kind === "object") values[name] = JSON.parse(raw);
    else values[name] = raw;
  }
  return values;
}
