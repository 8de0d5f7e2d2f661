// @vitest-environment happy-dom
// The search box over a saved page's state (fixture "page": a Linear-ReLU-Linear run).
import { describe, expect, it } from "vitest";
import { find } from "../src/find.js";
import { SearchBox } from "../src/search.js";
import { pageState } from "./state.js";

function searchBox() {
  const { state, model } = pageState("page");
  const root = document.createElement("div");
  document.body.append(root);
  const found = [];
  const box = new SearchBox(state, root, (id) => found.push(id));
  root.append(box.el);
  const key = (target, key) => target.dispatchEvent(new KeyboardEvent("keydown", { key, bubbles: true }));
  return { box, state, model, root, found, key };
}

describe("the search box", () => {
  it("selects the best match on Enter and writes the query", () => {
    const { box, state, model, found, key } = searchBox();
    box.input.value = "relu";
    key(box.input, "Enter");
    expect(found).toEqual([find("relu", state.graph())]);
    expect(found[0]).toBe("ReluBackward0_0");
    expect(model.get("query")).toBe("relu");
    expect(state.marks.search).toBeGreaterThanOrEqual(state.marks.render);
  });

  it("says when nothing matches, and Esc clears the box and the error", () => {
    const { box, found, key } = searchBox();
    box.input.value = "attention";
    key(box.input, "Enter");
    expect(found).toEqual([]);
    expect(box.error.textContent).toMatch(/^nothing is named like 'attention'/);
    key(box.input, "Escape");
    expect([box.input.value, box.error.textContent]).toEqual(["", ""]);
  });

  it("runs a search asked from Python once, and '/' anywhere in the widget focuses the box", () => {
    const { box, model, root, found, key } = searchBox();
    model.set("query", "0.weight");
    box.followQuery();
    box.followQuery(); // the same query again finds nothing new
    expect(found).toEqual(["0.weight"]);
    expect(box.input.value).toBe("0.weight");
    const other = document.createElement("span");
    root.append(other);
    key(other, "/");
    expect(document.activeElement).toBe(box.input);
  });
});
