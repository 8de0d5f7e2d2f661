// The one script of a saved page (hookviz.Widget.save_html): import the widget's bundle, which
// the file holds as base64 text, and draw the saved state with it (index.js renderSaved).
const text = (id) => document.getElementById(id).textContent;
const bytes = Uint8Array.from(atob(text("hookviz-esm")), (c) => c.charCodeAt(0));
const url = URL.createObjectURL(new Blob([bytes], { type: "text/javascript" }));
import(url).then(({ renderSaved }) =>
  renderSaved(document.getElementById("hookviz"), JSON.parse(text("hookviz-state"))),
);
