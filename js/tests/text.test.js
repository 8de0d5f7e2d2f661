// The page formats nothing Python formats (hookviz.text, hookviz.colors): it draws the text and
// the colours the payload carries. Read on payloads the Python tests wrote from real runs.
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { payload } from "./fixtures.js";

/** Every tensor record (TensorRecord.to_dict with its text) anywhere inside `data`. */
function tensors(data, out = []) {
  if (Array.isArray(data)) for (const v of data) tensors(v, out);
  else if (data && typeof data === "object") {
    if ("dtype" in data && "shape" in data && "numel" in data) out.push(data);
    else for (const v of Object.values(data)) tensors(v, out);
  }
  return out;
}

describe("the payload carries every text the page shows of a tensor", () => {
  const { inspectors, leaves } = payload("inspectors");
  const all = tensors(inspectors);

  it("a percentage of zeros for every tensor whose zero fraction was recorded", () => {
    const counted = all.filter((t) => t.zero_fraction !== undefined && t.zero_fraction !== null);
    const written = counted.filter((t) => /^(< |> )?\d+(\.\d+)?%$/.test(t.text.zeros));
    expect(counted.length).toBeGreaterThan(30);
    expect(written.length).toBe(counted.length);
    // the ReLU's outputs are partly zero: a percentage that is neither all nor nothing is among them
    expect(counted.some((t) => t.text.zeros !== "0%" && t.text.zeros !== "100%")).toBe(true);
  });

  it("the statistics and the small values as text", () => {
    const stats = all.filter((t) => t.norm !== undefined && t.norm !== null);
    expect(stats.length).toBeGreaterThan(30);
    expect(stats.filter((t) => ["norm", "mean", "min", "max"].every((k) => typeof t.text[k] === "string")).length).toBe(
      stats.filter((t) => "mean" in t).length,
    );
    const small = all.filter((t) => t.value !== null && t.value !== undefined && t.numel <= 16);
    expect(small.length).toBeGreaterThan(0);
    expect(small.filter((t) => t.text.value.startsWith("[") || !Array.isArray(t.value)).length).toBe(small.length);
  });

  it("the leaf table's numbers and ratios as text", () => {
    expect(leaves.length).toBe(4);
    expect(leaves.filter((l) => l.text.ratio === "1×" && typeof l.after.text.norm === "string").length).toBe(4);
  });
});

describe("the page's source formats no number", () => {
  const dir = fileURLToPath(new URL("../src/", import.meta.url));
  const sources = readdirSync(dir).filter((f) => f.endsWith(".js"));

  it("has no number formatting of its own", () => {
    expect(sources.length).toBeGreaterThan(8);
    const formatting = /\.toFixed\(|\.toPrecision\(|\.toExponential\(|toLocaleString\(|Intl\.NumberFormat/;
    const offenders = sources.filter((f) => formatting.test(readFileSync(dir + f, "utf8")));
    expect(offenders).toEqual([]);
  });

  it("has no colour of a norm of its own", () => {
    const colours = sources.filter((f) => /#e53935|viridis/i.test(readFileSync(dir + f, "utf8")));
    expect(colours).toEqual([]);
  });
});
