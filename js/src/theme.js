// JupyterLab's theme switch, seen from a widget already on the page.

/**
 * Call `callback` once each time JupyterLab switches theme (Light, Dark, ...): its theme manager
 * sets data-jp-theme-name and data-jp-theme-light on <body> once the new theme's CSS is in. What
 * copied the theme's colours (cytoscape's style, plotly's layout) must read them again then.
 * Returns a function that stops watching.
 */
export function onThemeChange(callback) {
  if (typeof MutationObserver === "undefined" || !document.body) return () => {};
  let frame = 0;
  const observer = new MutationObserver(() => {
    // Both attributes change in one switch: one call, after the new style is computed.
    cancelAnimationFrame(frame);
    frame = requestAnimationFrame(() => callback());
  });
  observer.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-name", "data-jp-theme-light"] });
  return () => {
    cancelAnimationFrame(frame);
    observer.disconnect();
  };
}
