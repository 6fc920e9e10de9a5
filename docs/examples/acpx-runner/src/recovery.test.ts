// The table of recovery.ts, one case each (node --test src/).

import { test } from "node:test";
import assert from "node:assert/strict";
import { classify, type Found, type TurnState } from "./recovery.ts";

const rows: Array<[string, TurnState, Found, string]> = [
  ["intent, acpx never began it: send it once", "intent", "absent", "send"],
  ["intent, the agent recorded it: fail closed", "intent", "recorded", "fail:ambiguous_turn_start"],
  ["intent, outcome unknown: fail closed", "intent", "unknown", "fail:ambiguous_turn_start"],
  ["intent, acpx completed it: fail closed, never adopted", "intent", "completed", "fail:ambiguous_turn_start"],
  ["accepted, acpx completed it: adopt", "accepted", "completed", "adopt"],
  ["accepted, recorded by the agent, unsettled: continue once", "accepted", "recorded", "continue"],
  ["accepted, outcome unknown: fail closed, never replayed", "accepted", "unknown", "fail:ambiguous_turn_start"],
  ["accepted, acpx lost its journal of it: fail closed", "accepted", "absent", "fail:ambiguous_turn_start"],
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
