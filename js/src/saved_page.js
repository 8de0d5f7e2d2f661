// The one script of a saved page (hookviz.Widget.save_html): import the widget's bundle, which
// the file holds gzipped as base64 text, and draw the saved state with it (index.js renderSaved).
const text = (id) => document.getElementById(id).textContent;
const packed = Uint8Array.from(atob(text("hookviz-esm")), (c) => c.charCodeAt(0));
const bundle = new Blob([packed]).stream().pipeThrough(new DecompressionStream("gzip"));
new Response(bundle)
  .blob()
  .then((code) => import(URL.createObjectURL(new Blob([code], { type: "text/javascript" }))))
  .then(({ renderSaved }) => renderSaved(document.getElementById("hookviz"), JSON.parse(text("hookviz-state"))));
