// Runs list: keep the "Compare selected" button honest about how many runs are ticked.
(function () {
  const form = document.getElementById("compare-form");
  if (!form) return;
  const button = document.getElementById("compare-selected");
  const note = document.getElementById("selected-count");
  function update() {
    const n = form.querySelectorAll('input[name="runs"]:checked').length;
    button.disabled = n < 2 || n > 50;
    note.textContent = n ? `${n} selected` + (n < 2 ? " (pick at least 2)" : n > 50 ? " (at most 50)" : "") : "Select 2–50 runs.";
  }
  form.addEventListener("change", update);
  update();
})();
