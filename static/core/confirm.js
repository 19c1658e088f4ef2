// Forms marked data-confirm="question" ask before they submit (revoking a token, draining a
// node): one listener for the whole page, so pages need no script of their own for it.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form && form.dataset ? form.dataset.confirm : null;
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });
})();
