// The table of recovery.ts, one case each (node --test src/).

import { test } from "node:test";
import assert from "node:assert/strict";
import { classify, type Found, type TurnState } from "./recovery.ts";

const rows: Array<[string, TurnState, Found, string]> = [
  ["intent, acpx never started it: send it once", "intent", "absent", "send"],
  ["intent, acpx started it: fail closed", "intent", "unsettled", "fail:ambiguous_turn_start"],
  ["intent, acpx completed it: fail closed, never adopted", "intent", "completed", "fail:ambiguous_turn_start"],
  ["accepted, acpx completed it: adopt", "accepted", "completed", "adopt"],
  ["accepted, unsettled: continue once", "accepted", "unsettled", "continue"],
  ["accepted, the journal lost it: close", "accepted", "absent", "fail:active_turn_recovery_closed"],
  ["continuation completed: adopt", "continuation", "completed", "adopt"],
  ["continuation unsettled: exhausted", "continuation", "unsettled", "fail:continuation_exhausted"],
  ["continuation absent: exhausted", "continuation", "absent", "fail:continuation_exhausted"],
];

for (const [name, turn, found, want] of rows) {
  test(name, () => {
    const d = classify(turn, found);
    assert.equal(d.do === "fail" ? `fail:${d.code}` : d.do, want);
  });
}
