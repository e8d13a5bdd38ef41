// Keyboard shortcuts. Every action is also a plain link, button or <details> on the page, so the
// console works without this file; it only maps a key to the element marked data-key="…".
"use strict";

document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing) return;
  const target = event.target;
  if (target instanceof Element && target.closest("input, textarea, select, [contenteditable]")) {
    if (event.key === "Escape") target.blur();
    return;
  }
  const element = document.querySelector(`[data-key="${CSS.escape(event.key)}"]`);
  if (!element) return;
  event.preventDefault();
  if (element.tagName === "SUMMARY") {
    const panel = element.parentElement;
    panel.open = true;
    const field = panel.querySelector("textarea, input:not([type=hidden]):not([type=checkbox])");
    if (field) field.focus();
    return;
  }
  element.click();
});
