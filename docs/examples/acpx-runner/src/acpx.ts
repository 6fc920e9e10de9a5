// What this runner asks of acpx, in one place: the shared runtime (sessions
// and turns through the queue owner acpx starts), the agent command a
// session is created with, and two reads of acpx's own files that its public
// API gives only as a never-ending watch: the queue owner's lease (its pid)
// and a request's outcome in the session journal (the markers `acpx sessions
// watch` reads, schema `acpx.session.journal.v1`). This module decides
// nothing; the engine does.

import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { createSharedAcpRuntime, type SharedAcpRuntime } from "acpx/runtime";
import { MARKER_ENV } from "./processes.ts";

/** The acpx version this runner was written against and is waved with. */
export const ACPX_VERSION = "0.19.1";

/** A request's outcome as acpx's journal records it. */
export type Outcome =
  | { kind: "none" }
  | { kind: "started" }
  | { kind: "completed"; stopReason: string }
  | { kind: "cancelled" }
  | { kind: "failed"; detailCode: string | null; message: string };

/** The queue owner acpx keeps for a session, from its lease file. */
export type Owner = { pid: number };

/** Names the runner's message id in the prompt's text (wire::marker): acpx
 * sends a prompt's content blocks and nothing of the caller's `_meta`. */
export function withMessageId(id: string, text: string): string {
  return `[turncut:message ${id}] ${text}`;
}

export class Acpx {
  readonly home: string;
  readonly runtime: SharedAcpRuntime;

  /** `home` becomes HOME: acpx keeps everything under `$HOME/.acpx`. */
  constructor(home: string, agents: Map<string, string>) {
    this.home = home;
    this.runtime = createSharedAcpRuntime({
      cwd: home,
      permissionMode: "approve-all",
      nonInteractivePermissions: "deny",
      // The owner outlives its clients (that is the point of it); the runner
      // stops it when the task settles, so its idle TTL only bounds a leak.
      ttlMs: 300_000,
      agentRegistry: {
        resolve: (name: string) => agents.get(name) ?? name,
        list: () => [...agents.keys()],
      },
    });
  }

  /** The agent command acpx stores with a session: the profile's argv,
   * started as a provider (its cut points report role `provider`) and
   * carrying the task's spawn marker. acpx splits it on spaces. */
  static agentCommand(argv: string[], marker: string): string {
    const bad = argv.find((a) => a.length === 0 || /\s|["'\\]/.test(a));
    if (bad !== undefined) throw new Error(`the agent argument ${JSON.stringify(bad)} cannot pass through acpx's command string`);
    return ["/usr/bin/env", "TURNCUT_ROLE=provider", `${MARKER_ENV}=${marker}`, ...argv].join(" ");
  }

  /** The live queue owner of session `recordId`, if its lease names one. */
  owner(recordId: string): Owner | null {
    const dir = join(this.home, ".acpx", "queues");
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      return null;
    }
    for (const name of names.filter((n) => n.endsWith(".lock"))) {
      try {
        const lease = JSON.parse(readFileSync(join(dir, name), "utf8"));
        if (lease.sessionId === recordId && Number.isInteger(lease.pid) && alive(lease.pid)) return { pid: lease.pid };
      } catch {
        // A lease being replaced, or torn by a crash: no owner we can name.
      }
    }
    return null;
  }

  /** Whether the queue owner whose lease is `<key>.lock` (acpx's queue
   * key of a session, which names its socket too) is alive. */
  ownerAlive(key: string): boolean {
    try {
      const lease = JSON.parse(readFileSync(join(this.home, ".acpx", "queues", `${key}.lock`), "utf8"));
      return Number.isInteger(lease.pid) && alive(lease.pid);
    } catch {
      // No lease, or one torn by a crash: no owner to keep a socket for.
      return false;
    }
  }

  /** Whether acpx still has the record of session `recordId` (a power
   * cut can take it: acpx syncs nothing). */
  hasRecord(recordId: string): boolean {
    return existsSync(join(this.home, ".acpx", "sessions", `${encodeURIComponent(recordId)}.json`));
  }

  /** Request `requestId`'s outcome in the journal of session `recordId`;
   * `size` is the journal's length, which grows with every message acpx
   * journals (the engine's sign of life while it follows a turn). */
  outcome(recordId: string, requestId: string): { outcome: Outcome; size: number; echoed: boolean } {
    let text: string;
    try {
      text = readFileSync(join(this.home, ".acpx", "sessions", `${encodeURIComponent(recordId)}.stream.ndjson`), "utf8");
    } catch {
      return { outcome: { kind: "none" }, size: 0, echoed: false };
    }
    let outcome: Outcome = { kind: "none" };
    for (const line of text.split("\n")) {
      if (!line.includes("acpx.session.journal.v1") || !line.includes(requestId)) continue;
      let m: any;
      try {
        m = JSON.parse(line);
      } catch {
        continue; // A line still being written.
      }
      if (m.request_id !== requestId) continue;
      if (m.type === "turn_started") outcome = { kind: "started" };
      if (m.type === "turn_result") {
        const r = m.result ?? {};
        outcome =
          r.status === "completed"
            ? { kind: "completed", stopReason: String(r.stopReason ?? "") }
            : r.status === "cancelled"
              ? { kind: "cancelled" }
              : { kind: "failed", detailCode: r.error?.detailCode ?? null, message: String(r.error?.message ?? "") };
      }
    }
    return { outcome, size: text.length, echoed: echoed(text, requestId) };
  }
}

/** Whether acpx's journal of session `recordId` holds the agent's echo of
 * message `clientId` (a `user_message_chunk` with that `messageId`): the
 * agent recorded the turn, live or in a `session/load` replay acpx
 * journaled. acpx journals the agent's messages in batches (every 500 ms),
 * so an echo the agent sent just before a crash may be missing. */
export function echoed(text: string, clientId: string): boolean {
  const id = JSON.stringify(clientId);
  return text
    .split("\n")
    .some((l) => l.includes('"user_message_chunk"') && l.includes(`"messageId":${id}`));
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return false;
  }
}
