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

/** acpx's journal: the request completed (`turn_result` completed); the
 * agent recorded the turn (its echo of the message is in the journal, live
 * or replayed) and it did not complete; or neither (never started, or
 * started with no echo journaled: the agent never saw it, or acpx lost the
 * echo with its unflushed batch). */
export type Found = "absent" | "recorded" | "completed";

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
    // No echo journaled: as far as acpx can tell, no agent recorded it.
    if (found === "absent") return { do: "send" };
    return { do: "fail", code: "ambiguous_turn_start", message: "the agent recorded a turn the runner never saw accepted; neither replayed nor adopted" };
  }
  if (found === "completed") return { do: "adopt" };
  // Accepted, but no echo: the agent never recorded it (a prompt written
  // to an agent killed before it read it); sent once more.
  if (found === "absent") return { do: "send" };
  return { do: "continue" };
}
