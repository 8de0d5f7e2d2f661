// The replay of the recorded backward order: which nodes have run at step k, and which drawn
// element stands for each. No DOM.

/**
 * Replay state at step k of the recorded backward order.
 * steps: [{node, hooks: [...]}]. k = -1 means "replay off".
 * Returns {active, lit: Set of node ids that have run, current: node id running now or null, hooks}.
 */
export function replayState(steps, k) {
  const n = steps ? steps.length : 0;
  if (k === null || k === undefined || k < 0 || n === 0)
    return { active: false, lit: new Set(), current: null, hooks: [] };
  const kk = Math.min(k, n - 1);
  const lit = new Set();
  for (let i = 0; i <= kk; i++) lit.add(steps[i].node);
  return { active: true, lit, current: steps[kk].node, hooks: steps[kk].hooks || [], step: kk };
}

/** Map replay state (in node ids) onto visible elements (a collapsed group lights when any member ran). */
export function replayOnVisible(state, representative) {
  const lit = new Set();
  for (const id of state.lit) lit.add(representative.get(id) ?? id);
  const current = state.current === null ? null : (representative.get(state.current) ?? state.current);
  return { ...state, lit, current };
}
