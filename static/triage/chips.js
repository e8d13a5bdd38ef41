// Labels as chips in the edit form: any number, type-ahead from the queue's vocabulary (the
// <datalist>), Enter adds, Backspace in the empty field removes the last, × removes one. Without
// this file the form keeps its checkboxes and fields, and works the same.
"use strict";

function enhanceLabels(fieldset) {
  if (fieldset.dataset.enhanced) return;
  fieldset.dataset.enhanced = "true";
  const form = fieldset.closest("form");
  const start = [
    ...[...fieldset.querySelectorAll("input[type=checkbox][name=add]:checked")].map((box) => box.value),
    ...[...fieldset.querySelectorAll("input.label-input")].map((field) => field.value),
  ];
  fieldset.querySelectorAll("label.check, input.label-input").forEach((old) => old.remove());

  const editor = document.createElement("div");
  editor.className = "chips-editor";
  const input = document.createElement("input");
  input.className = "chip-input";
  input.setAttribute("list", fieldset.dataset.chips);
  input.setAttribute("autocomplete", "off");
  input.setAttribute("aria-label", "Add a label");
  input.placeholder = "add a label…";
  editor.append(input);
  fieldset.append(editor);

  const chosen = () => [...editor.querySelectorAll("input[type=hidden][name=add]")];
  const add = (text) => {
    const label = text.trim();
    if (!label || chosen().some((hidden) => hidden.value === label)) return;
    const chip = document.createElement("span");
    chip.className = "chip add";
    chip.dataset.label = label;
    const hidden = document.createElement("input");
    hidden.type = "hidden";
    hidden.name = "add";
    hidden.value = label;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "link";
    remove.textContent = "×";
    remove.setAttribute("aria-label", `Remove ${label}`);
    remove.addEventListener("click", () => { chip.remove(); input.focus(); });
    chip.append(`+ ${label} `, hidden, remove);
    editor.insertBefore(chip, input);
  };
  start.forEach(add);

  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      add(input.value);
      input.value = "";
      // Enter adds a label; Ctrl+Enter (keys.js) then sends the form.
      if (!event.ctrlKey && !event.metaKey) event.preventDefault();
    } else if (event.key === "Backspace" && !input.value) {
      const chips = editor.querySelectorAll(".chip");
      if (chips.length) chips[chips.length - 1].remove();
    }
  });
  // A label typed but not confirmed with Enter still counts when the form is sent.
  input.addEventListener("change", () => { add(input.value); input.value = ""; });
  form.addEventListener("submit", () => { add(input.value); input.value = ""; }, true);
}

function enhanceAll(root) {
  root.querySelectorAll("fieldset[data-chips]").forEach(enhanceLabels);
}

document.addEventListener("DOMContentLoaded", () => enhanceAll(document));
document.addEventListener("htmx:load", (event) => enhanceAll(event.detail.elt));
