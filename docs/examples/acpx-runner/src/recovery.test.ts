// The table of recovery.ts, one case each (node --test src/).

import { test } from "node:test";
import assert from "node:assert/strict";
import { classify, type Found, type TurnState } from "./recovery.ts";

const rows: Array<[string, TurnState, Found, string]> = [
  ["intent, no echo journaled: send it once", "intent", "absent", "send"],
  ["intent, the agent recorded it: fail closed", "intent", "recorded", "fail:ambiguous_turn_start"],
  ["intent, acpx completed it: fail closed, never adopted", "intent", "completed", "fail:ambiguous_turn_start"],
  ["accepted, acpx completed it: adopt", "accepted", "completed", "adopt"],
  ["accepted, recorded, unsettled: continue once", "accepted", "recorded", "continue"],
  ["accepted, never recorded by the agent: send once more", "accepted", "absent", "send"],
  ["continuation completed: adopt", "continuation", "completed", "adopt"],
  ["continuation recorded: exhausted", "continuation", "recorded", "fail:continuation_exhausted"],
  ["continuation absent: exhausted", "continuation", "absent", "fail:continuation_exhausted"],
];

for (const [name, turn, found, want] of rows) {
  test(name, () => {
    const d = classify(turn, found);
    assert.equal(d.do === "fail" ? `fail:${d.code}` : d.do, want);
  });
}
