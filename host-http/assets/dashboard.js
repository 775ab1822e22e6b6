// The dashboard works without this script; with it, a secret shown once (an input marked
// `data-copy`) gets a button that copies it to the clipboard.
(function () {
  "use strict";
  document.querySelectorAll("input[data-copy]").forEach(function (input) {
    var button = document.createElement("button");
    button.type = "button";
    button.className = "button secondary compact copy";
    button.textContent = input.getAttribute("data-copy");
    button.setAttribute("aria-describedby", input.id);
    var done = function () {
      button.textContent = "\u2713 " + input.getAttribute("data-copy");
    };
    var fallback = function () {
      input.select();
      if (document.execCommand("copy")) {
        done();
      }
    };
    button.addEventListener("click", function () {
      input.select();
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(input.value).then(done, fallback);
      } else {
        fallback();
      }
    });
    input.insertAdjacentElement("afterend", button);
  });
})();
