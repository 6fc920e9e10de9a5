// What to do with a turn whose result this runner process did not see, its
// queue owner gone: a pure function of what the store holds and what acpx's
// session journal says of the request, following the recovery rows of
// docs/recovery-contract.md with acpx's journal in the place of the agent's
// `session/load` replay: the agent's echo of the message, journaled by acpx,
// is "the turn is recorded". acpx writes `turn_started` before it connects
// to the agent and sends the prompt, so `turn_started` alone says nothing of
// the agent (acpx itself says of such a turn "its outcome is unknown ... do
// not automatically replay the prompt", WATCH_OUTCOME_UNKNOWN).

/** The store's side: the turn as an intent, accepted (acpx wrote the prompt
 * to the agent), or the one continuation of a lost turn. */
export type TurnState = "intent" | "accepted" | "continuation";

/** acpx's journal of the request: no `turn_started` (acpx never began it);
 * started, and the agent's echo of the message is journaled (the agent
 * recorded the turn) but no result; started with neither echo nor result
 * (acpx cannot say whether the agent recorded it: it journals the agent's
 * messages in 500 ms batches, and a killed owner takes its last batch with
 * it); or completed. */
export type Found = "absent" | "recorded" | "unknown" | "completed";

export type Decision =
  | { do: "adopt" }
  | { do: "send" }
  | { do: "continue" }
  | { do: "fail"; code: "ambiguous_turn_start" | "continuation_exhausted"; message: string };

export function classify(turn: TurnState, found: Found): Decision {
  if (turn === "continuation") {
    if (found === "completed") return { do: "adopt" };
    return { do: "fail", code: "continuation_exhausted", message: "the continuation of a lost turn was itself cut; a turn is continued once" };
  }
  if (turn === "intent") {
    // acpx never began it: no agent saw it.
    if (found === "absent") return { do: "send" };
    return { do: "fail", code: "ambiguous_turn_start", message: "acpx began a turn the runner never saw accepted; neither replayed nor adopted" };
  }
  if (found === "completed") return { do: "adopt" };
  if (found === "recorded") return { do: "continue" };
  // Unknown (acpx: WATCH_OUTCOME_UNKNOWN, "do not automatically replay the
  // prompt"), or acpx lost its journal of a turn it sent (a power cut).
  return { do: "fail", code: "ambiguous_turn_start", message: "acpx cannot tell whether the agent recorded the turn (WATCH_OUTCOME_UNKNOWN, no echo journaled): neither replayed nor continued" };
}
