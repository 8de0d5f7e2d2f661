// Numbers as Python sends them in JSON: the page sorts and scales by them, never formats them
// (the payload carries every text: hookviz.text). No DOM.

/** A JSON-safe number from Python ("nan", "inf", "-inf" or null are allowed), to sort or draw by. */
export function parseNumber(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === "number") return v;
  if (v === "NaN" || v === "nan") return NaN;
  if (v === "Infinity" || v === "inf") return Infinity;
  if (v === "-Infinity" || v === "-inf") return -Infinity;
  const n = Number(v);
  return Number.isNaN(n) ? null : n;
}
