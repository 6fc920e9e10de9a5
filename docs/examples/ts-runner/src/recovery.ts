// What to do with a turn whose execution was cut (the runner restarted, or its
// provider was lost): a pure function of what the store holds and what the
// provider says, following the Codex rows of docs/recovery-contract.md. The
// engine asks the provider (thread/read) and carries the decision out.

export type TurnState =
  | { kind: "intent" }
  | { kind: "accepted"; providerTurnId: string }
  | { kind: "continuation" };

/** The provider's turn: found, whether its user message is recorded, its status. */
export type Found = { recorded: boolean; status: string } | null;

export type Decision =
  | { do: "adopt" }
  | { do: "send"; absent: boolean }
  | { do: "continue" }
  | { do: "fail"; code: "ambiguous_turn_start" | "active_turn_recovery_closed" | "continuation_exhausted"; message: string };

/** `approvalOpen`: an approval of the turn was requested and never answered,
 * or answered accept for a command that never completed (it may have run). */
export function classify(turn: TurnState, found: Found, approvalOpen: boolean, outputHeld: boolean): Decision {
  if (turn.kind === "continuation") {
    if (found?.recorded && found.status === "completed") return { do: "adopt" };
    return { do: "fail", code: "continuation_exhausted", message: "the continuation of a lost turn was itself cut; a turn is continued once" };
  }
  if (turn.kind === "intent") {
    // Recorded with its user message: the model may have seen it, and the
    // runner never saw it accepted. Neither replay nor adopt.
    if (found?.recorded) {
      return { do: "fail", code: "ambiguous_turn_start", message: `the provider recorded a turn (${found.status}) the runner never saw accepted` };
    }
    return { do: "send", absent: true };
  }
  // No record of an accepted turn means no model saw it — unless the runner
  // holds its output (an item, a request): then the provider lost it (a
  // power cut), and sending it again would run it twice.
  if (!found?.recorded && outputHeld) {
    return { do: "fail", code: "active_turn_recovery_closed", message: "the provider has no record of the accepted turn, though the runner holds its output" };
  }
  if (!found?.recorded) return { do: "send", absent: true };
  if (found.status === "completed") return { do: "adopt" };
  if (approvalOpen) {
    return { do: "fail", code: "active_turn_recovery_closed", message: "the lost turn had an approval pending, or an approved command that may have run" };
  }
  return { do: "continue" };
}
