// A refused budget or quota form comes back with its bad fields marked: put the cursor in the
// first one. The form's #section anchor scrolls there; with an anchor in the URL browsers skip
// the autofocus attribute, and scrolling to it takes the focus away again, hence "load".
(function () {
  "use strict";
  function focusInvalid() {
    var field = document.querySelector(".limits-table [aria-invalid=true]");
    if (field) field.focus();
  }
  if (document.readyState === "complete") focusInvalid(); else window.addEventListener("load", focusInvalid);
})();
