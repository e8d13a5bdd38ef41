// Keyboard shortcuts. Every action is also a plain link, button or <details> on the page, so the
// console works without this file; it only maps a key to the element marked data-key="…".
// A key may follow "g" ("g i": go to the inbox), as in GitHub's and Gmail's shortcuts.
"use strict";

let prefix = "";
let prefixTimer = 0;

document.addEventListener("keydown", (event) => {
  const target = event.target;
  // A checkbox just clicked has the focus but takes no text: keys still work there.
  const typing =
    target instanceof Element &&
    target.closest("textarea, select, [contenteditable], input:not([type=checkbox]):not([type=radio])");
  if (typing && event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    // A note or a reason is sent without reaching for the mouse.
    const form = target.closest("form");
    if (form) {
      event.preventDefault();
      form.requestSubmit();
    }
    return;
  }
  if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing) return;
  if (typing) {
    if (event.key === "Escape") target.blur();
    return;
  }
  const key = prefix ? `${prefix} ${event.key}` : event.key;
  prefix = "";
  clearTimeout(prefixTimer);
  if (key === "g") {
    prefix = "g";
    prefixTimer = setTimeout(() => { prefix = ""; }, 1500);
    event.preventDefault();
    return;
  }
  if (key === "x" && toggleCurrentRow()) {
    event.preventDefault();
    return;
  }
  const element = document.querySelector(`[data-key="${CSS.escape(key)}"]`);
  if (!element) return;
  event.preventDefault();
  if (element.tagName === "SUMMARY") {
    const panel = element.parentElement;
    panel.open = !panel.open || panel.id !== "keys-help";
    const field = panel.querySelector("textarea, input:not([type=hidden]):not([type=checkbox])");
    if (panel.open && field) field.focus();
    return;
  }
  if (element.matches("input, textarea, select")) {
    element.focus();
    if (element.select) element.select();
    return;
  }
  element.click();
});

// Shift-click on a row's checkbox selects every row between it and the one clicked before.
let lastChecked = null;

function check(box, range) {
  const boxes = [...document.querySelectorAll("input.select")];
  if (range && lastChecked && boxes.includes(lastChecked)) {
    const [from, to] = [boxes.indexOf(lastChecked), boxes.indexOf(box)].sort((a, b) => a - b);
    for (const other of boxes.slice(from, to + 1)) other.checked = box.checked;
  }
  lastChecked = box;
}

document.addEventListener("click", (event) => {
  const box = event.target;
  if (!(box instanceof HTMLInputElement) || !box.classList.contains("select")) return;
  check(box, event.shiftKey);
  moveAfter(box);
});

// In the inbox, "x" selects (or unselects) the current row, the first at the start, and moves to
// the next, as in Gmail; a click on a checkbox moves there too. The current row is kept by
// proposal, so the list's polling, which redraws the rows, does not lose it.
let currentRow = "";

function markCurrent(value) {
  currentRow = value;
  for (const row of document.querySelectorAll("tr.current")) row.classList.remove("current");
  const box = value && document.querySelector(`input.select[value="${CSS.escape(value)}"]`);
  if (box) {
    const row = box.closest("tr");
    row.classList.add("current");
    row.scrollIntoView({ block: "nearest" });
  }
}

function moveAfter(box) {
  const boxes = [...document.querySelectorAll("input.select")];
  markCurrent((boxes[boxes.indexOf(box) + 1] || box).value);
}

function toggleCurrentRow() {
  const boxes = [...document.querySelectorAll("input.select")];
  if (!boxes.length) return false;
  const box = boxes.find((candidate) => candidate.value === currentRow) || boxes[0];
  box.checked = !box.checked;
  lastChecked = box;
  moveAfter(box);
  return true;
}

document.addEventListener("htmx:afterSwap", () => markCurrent(currentRow));
