/**
 * Small DOM helpers of the browser console: find the page's elements, fill
 * tables, say what is going on in a status line. Text is always set as
 * text, never as HTML, so nothing a node or service answers can inject
 * markup.
 *
 * @module
 */

/** The page's element with `id`; throws when the page lacks it (a bug, shown as a startup error). */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const element = document.getElementById(id);
  if (element === null) throw new Error(`the page has no element #${id}`);
  return element as T;
}

/** Options of {@linkcode cell}. */
export interface CellOptions {
  /** The column's name, shown before the value when tables stack at phone width. */
  label: string;
  /** CSS classes, e.g. "hex". */
  className?: string;
}

/** A table cell holding `content` (text, or an element such as a badge). */
export function cell(content: string | Node, options: CellOptions): HTMLTableCellElement {
  const td = document.createElement("td");
  td.dataset.label = options.label;
  if (options.className) td.className = options.className;
  td.append(content);
  return td;
}

/** A small coloured label, e.g. "MISMATCH". */
export function badge(text: string, kind: "ok" | "bad" | "warn" | "unknown"): HTMLSpanElement {
  const span = document.createElement("span");
  span.className = `badge ${kind}`;
  span.textContent = text;
  return span;
}

/** A button that calls `onClick`. */
export function button(text: string, onClick: () => void, className = "secondary"): HTMLButtonElement {
  const element = document.createElement("button");
  element.type = "button";
  element.className = className;
  element.textContent = text;
  element.addEventListener("click", onClick);
  return element;
}

/** Shows `text` in the status line `element` (an error in red; empty text hides it). */
export function setStatus(element: HTMLElement, text: string, kind: "info" | "error" = "info"): void {
  element.textContent = text;
  element.classList.toggle("error", kind === "error" && text !== "");
}

/** Offers `text` to the user as the file `name` (a download). */
export function download(name: string, text: string, type = "application/json"): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** `time` (Unix ms) as local date and time. */
export function formatTime(time: number): string {
  return new Date(time).toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}
