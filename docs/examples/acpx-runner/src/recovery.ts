// What to do with a turn whose result this runner process did not see, its
// queue owner gone: a pure function of what the store holds and what acpx's
// session journal says of the request, following the ACP rows of
// docs/recovery-contract.md with acpx's journal in the place of the agent's
// `session/load` replay. acpx writes `turn_started` before it connects to the
// agent and sends the prompt, so a started turn may or may not have reached
// the agent; acpx itself says of such a turn "its outcome is unknown ... do
// not automatically replay the prompt" (WATCH_OUTCOME_UNKNOWN).

/** The store's side: the turn as an intent, accepted (acpx wrote the prompt
 * to the agent), or the one continuation of a lost turn. */
export type TurnState = "intent" | "accepted" | "continuation";

/** acpx's journal: no `turn_started` for the request, a `turn_result`
 * completed, or started and never settled (no result, or a failed or
 * cancelled one: the turn did not end by itself). */
export type Found = "absent" | "completed" | "unsettled";

export type Decision =
  | { do: "adopt" }
  | { do: "send" }
  | { do: "continue" }
  | { do: "fail"; code: "ambiguous_turn_start" | "active_turn_recovery_closed" | "continuation_exhausted"; message: string };

export function classify(turn: TurnState, found: Found): Decision {
  if (turn === "continuation") {
    if (found === "completed") return { do: "adopt" };
    return { do: "fail", code: "continuation_exhausted", message: "the continuation of a lost turn was itself cut; a turn is continued once" };
  }
  if (turn === "intent") {
    // acpx never started it: no agent saw it.
    if (found === "absent") return { do: "send" };
    return { do: "fail", code: "ambiguous_turn_start", message: "acpx started a turn the runner never saw accepted; neither replayed nor adopted" };
  }
  if (found === "completed") return { do: "adopt" };
  if (found === "absent") {
    // acpx wrote the prompt to the agent, yet its journal has no such turn:
    // the journal lost it (acpx does not sync it), so a model may have seen it.
    return { do: "fail", code: "active_turn_recovery_closed", message: "acpx's journal lost a turn the runner saw it send to the agent" };
  }
  return { do: "continue" };
}
