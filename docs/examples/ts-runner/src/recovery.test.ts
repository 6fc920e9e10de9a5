// The Codex rows of docs/recovery-contract.md, one case each, against
// `classify` (node --test src/).

import { test } from "node:test";
import assert from "node:assert/strict";
import { classify, type Found, type TurnState } from "./recovery.ts";

const intent: TurnState = { kind: "intent" };
const accepted: TurnState = { kind: "accepted", providerTurnId: "t1" };
const continuation: TurnState = { kind: "continuation" };
const recorded = (status: string): Found => ({ recorded: true, status });
const noMessage: Found = { recorded: false, status: "interrupted" };

const rows: Array<[string, TurnState, Found, boolean, string, boolean?]> = [
  ["intent only, turn absent: start it once", intent, null, false, "send"],
  ["intent only, turn without its user message: start it once", intent, noMessage, false, "send"],
  ["intent only, turn recorded: fail closed", intent, recorded("interrupted"), false, "fail:ambiguous_turn_start"],
  ["intent only, turn recorded completed: fail closed, never adopted", intent, recorded("completed"), false, "fail:ambiguous_turn_start"],
  ["accepted, turn absent: send once more", accepted, null, false, "send"],
  ["accepted, turn without its user message: send once more", accepted, noMessage, false, "send"],
  ["accepted, turn absent, its output held: close", accepted, null, false, "fail:active_turn_recovery_closed", true],
  ["accepted, turn without its user message, its output held: close", accepted, noMessage, false, "fail:active_turn_recovery_closed", true],
  ["accepted, turn interrupted: continue once", accepted, recorded("interrupted"), false, "continue"],
  ["accepted, turn in progress: continue once", accepted, recorded("inProgress"), false, "continue"],
  ["accepted, turn completed: adopt", accepted, recorded("completed"), false, "adopt"],
  ["accepted, approval open: close", accepted, recorded("interrupted"), true, "fail:active_turn_recovery_closed"],
  ["continuation not completed: exhausted", continuation, recorded("interrupted"), false, "fail:continuation_exhausted"],
  ["continuation absent: exhausted", continuation, null, false, "fail:continuation_exhausted"],
  ["continuation completed: adopt", continuation, recorded("completed"), false, "adopt"],
];

for (const [name, turn, found, approvalOpen, want, outputHeld] of rows) {
  test(name, () => {
    const d = classify(turn, found, approvalOpen, outputHeld ?? false);
    assert.equal(d.do === "fail" ? `fail:${d.code}` : d.do, want);
  });
}
