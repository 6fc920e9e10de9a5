// The engine: one actor per task, deciding every step from the store, as in
// ts-runner; but the provider here is acpx. A run's conversation is an acpx
// session (`ensureSession`); every message is a turn submitted to acpx's
// queue owner under the message id as acpx's request id (`startTurn`), as
// soon as it is accepted: a follow-up that arrives during a turn waits in
// acpx's queue, not here. What acpx says about a turn is what the run log
// records: `turn.accepted` when acpx wrote the prompt to the agent
// (`promptStarted`), `turn.finished` at its result. A turn whose result this
// process did not see (a restart, a lost owner) is looked up in acpx's
// session journal and classified by the ACP rows of
// docs/recovery-contract.md, with acpx's journal in the place of the agent's
// replay (recovery.ts). Nothing is sent twice by this runner unless acpx's
// own journal shows it never started.
//
// Processes: acpx starts its queue owner in a session of its own (so a
// runner crash leaves it running, and the restarted runner re-attaches to it
// through acpx's lease and journal), and the agent in the owner's process
// group. Both carry the task's spawn marker. The runner names each owner it
// finds in `provider.spawned`, stops it (group, then marker) when the run
// settles and before a Retry, and calls an owner that journals nothing for
// the idle timeout unresponsive.

import { join } from "node:path";
import { randomUUID } from "node:crypto";
import type { AcpRuntimeHandle } from "acpx/runtime";
import { Acpx, type Outcome, withMessageId } from "./acpx.ts";
import { MARKER_ENV, aliveSame, startTime, sweep } from "./processes.ts";
import { classify, type Found } from "./recovery.ts";
import { Sockets, sweepAbandoned } from "./sockets.ts";
import { StorageError, mkdirDurable, type Cause, type Message, type Run, type Store, type Task, type Turn } from "./store.ts";

export type Profile = { driver: string; command: string[]; approval: string; credential_env: string };
export type Options = { stateDir: string; idleMs: number; termGraceMs: number; profiles: Map<string, Profile> };

/** A step that must fail the run with this cause. */
class Fail extends Error {
  code: string;
  recoverable: boolean;
  constructor(code: string, message: string, recoverable = false) {
    super(message);
    this.code = code;
    this.recoverable = recoverable;
  }
}

export function newId(prefix: string): string {
  return `${prefix}-${randomUUID().replaceAll("-", "")}`;
}

/** The continuation's text (wire::marker::CONTINUE_TEXT): never the message again. */
export const CONTINUE_TEXT =
  "[turncut:continue] The previous turn was interrupted by a restart. Continue it; do not redo finished steps. [turncut:check-aborted] A command reported as aborted may have run before the restart: check whether its effect is already there before running it again.";

/** acpx journals a turn's messages every 500 ms (its live checkpoint) and its
 * watch polls every 100 ms; the queue owner and the agent are Node and Rust
 * processes started per session. A silence shorter than this is acpx's
 * batching and start-up, not a hung owner, so the idle timeout the harness
 * gives (50 ms in hang cells) is raised to it. */
const IDLE_FLOOR_MS = 3_000;

/** How long acpx may take from a submission to writing the prompt to the
 * agent: it starts a queue owner (Node), the agent, and reconnects the
 * session first. */
const START_MS = 30_000;

/** Submissions of one turn in one runner process after its owner was lost
 * (a bound, not a record: each restart starts again). */
const SENDS_MAX = 3;

/** How often a turn being followed is looked at (owner alive, journal grown). */
const FOLLOW_TICK_MS = 100;

/** A turn this runner process submitted: acpx's answer, and the last time
 * acpx said anything of it. */
type Flight = { result: Promise<{ status: string; stopReason?: string; error?: { message: string; detailCode?: string } }>; lastMs: number; accepted: Promise<void>; started: boolean };

export class Engine {
  private actors = new Map<string, { again: boolean; wake: () => void }>();
  private flights = new Map<string, Flight>();
  private agents = new Map<string, string>();
  /** Submissions again per turn in this process (`SENDS_MAX`). */
  private sends = new Map<string, number>();
  /** Runs whose acpx session record this process restored (acpx lost it). */
  private restored = new Set<string>();
  /** Tasks whose earlier acpx processes this runner process has stopped. */
  private claimed = new Set<string>();
  private acpx: Acpx;
  /** acpx's socket directory of this HOME, outside it (sockets.ts). */
  private sockets: Sockets;

  readonly store: Store;
  readonly opts: Options;

  constructor(store: Store, opts: Options) {
    this.store = store;
    this.opts = opts;
    const home = join(opts.stateDir, "acpx-home");
    mkdirDurable(home);
    process.env.HOME = home;
    this.acpx = new Acpx(home, this.agents);
    this.sockets = new Sockets(home, opts.stateDir);
    for (const dir of sweepAbandoned()) process.stderr.write(`acpx-runner: removed ${dir}, acpx's socket directory of a state directory that is gone\n`);
    this.releaseSockets();
  }

  /** Removes acpx's socket directory of this HOME if no task is running
   * (so no owner is starting) and no owner of this runner is alive; at
   * every settle, and when the runner is told to exit. */
  releaseSockets(): void {
    if (this.store.runningTasks().length > 0) return;
    try {
      this.sockets.release((key) => this.acpx.ownerAlive(key));
    } catch (e) {
      // Housekeeping: what is left, the next runner's sweep removes.
      process.stderr.write(`acpx-runner: cannot remove ${this.sockets.dir}: ${(e as Error).message}\n`);
    }
  }

  private get idleMs(): number {
    return Math.max(this.opts.idleMs, IDLE_FLOOR_MS);
  }

  /** Makes the task's actor take another step (starting it if idle). */
  wake(taskId: string): void {
    const actor = this.actors.get(taskId);
    if (actor) {
      actor.again = true;
      actor.wake();
      return;
    }
    const state = { again: true, wake: () => {} };
    this.actors.set(taskId, state);
    void (async () => {
      try {
        while (state.again) {
          state.again = false;
          while (await this.step(taskId, state)) {}
        }
      } finally {
        this.actors.delete(taskId);
      }
    })();
  }

  /** One step; true while there is more to do. */
  private async step(taskId: string, actor: { again: boolean; wake: () => void }): Promise<boolean> {
    const task = this.store.task(taskId);
    if (!task || task.state !== "running") return false;
    const run = this.store.run(task.current_run)!;
    try {
      // Old provider first: whatever acpx ran for this task under an earlier
      // runner process (its queue owner, the agent, their children) is
      // stopped, with proof, before this one uses the session; acpx then
      // reconnects a new owner to the saved session (session/load).
      if (!this.claimed.has(taskId)) {
        await this.stopAll(task, run.run_id);
        this.claimed.add(taskId);
      }
      const session = await this.conversation(task, run);
      await this.submitQueued(task, run, session);
      // A continuation goes first: it stands for an earlier message than any
      // follow-up whose turn row comes before it (after a restart, a
      // follow-up submitted again ahead of it was continued in its place).
      const open = this.store.turns(run.run_id).filter((t) => t.status === "intent" || t.status === "accepted");
      const unfinished = open.find((t) => t.kind === "continuation") ?? open[0];
      if (!unfinished) {
        await this.settle(task, run, null);
        return false;
      }
      await this.follow(task, run, session, unfinished, actor);
      return true;
    } catch (e) {
      return this.stepFailed(task, run, e);
    }
  }

  private async stepFailed(task: Task, run: Run, e: unknown): Promise<boolean> {
    const cause: Cause =
      e instanceof StorageError
        ? { code: "storage_failed", recoverable: false, message: e.message }
        : e instanceof Fail
          ? { code: e.code, recoverable: e.recoverable, message: e.message }
          : { code: "provider_protocol_error", recoverable: false, message: String((e as Error)?.message ?? e) };
    try {
      await this.settle(task, run, cause);
    } catch (again) {
      process.stderr.write(`acpx-runner: task ${task.task_id}: could not record ${cause.code}: ${again}\n`);
    }
    return false;
  }

  /** The run's acpx session: created once (durable), its id the
   * conversation id. A Retry run gets a session of its own. */
  private async conversation(task: Task, run: Run): Promise<AcpRuntimeHandle> {
    const current = this.store.run(run.run_id)!;
    const have = current.conversation_id;
    if (have !== null && this.acpx.hasRecord(have)) return handle(have, task.workspace);
    const marker = await this.marker(task, run);
    const profile = this.opts.profiles.get(task.profile)!;
    const providerDir = join(this.opts.stateDir, "providers", encodeURIComponent(task.task_id));
    mkdirDurable(providerDir);
    const argv = profile.command.map((a) =>
      a.replaceAll("{provider_dir}", providerDir).replaceAll("{workspace}", task.workspace).replaceAll("{task_id}", task.task_id),
    );
    let command: string;
    try {
      command = Acpx.agentCommand(argv, marker);
    } catch (e) {
      throw new Fail("provider_start_failed", (e as Error).message);
    }
    const agent = `turncut-${task.profile}`;
    this.agents.set(agent, command);
    // A Retry's run opens a session under a key of its own: acpx finds a
    // session by agent, directory and key, and the Retry's must be fresh.
    const key = run.kind === "retry" ? `${task.task_id}/${run.run_id}` : task.task_id;
    // acpx lost the record of a session this run opened (a power cut: it
    // syncs none of its files): its documented way back is a session that
    // resumes the agent's session id (`sessions new --resume-session`).
    const resume = have ?? undefined;
    let h: AcpRuntimeHandle;
    try {
      this.sockets.claim();
      h = await this.acpx.runtime.ensureSession({ sessionKey: key, agent, cwd: task.workspace, mode: "persistent", resumeSessionId: resume });
    } catch (e) {
      throw new Fail("provider_start_failed", `acpx could not ${resume ? `resume session ${resume}` : "ensure a session"}: ${(e as Error).message}`);
    }
    if (resume !== undefined && h.acpxRecordId !== resume) {
      // acpx names the resumed session's record anew: the conversation is
      // the agent's session, which the run keeps.
      process.stderr.write(`acpx-runner: acpx restored session ${resume} as record ${h.acpxRecordId}\n`);
    }
    if (resume) this.restored.add(run.run_id);
    const kind = resume ? "conversation.restored" : "conversation.opened";
    await this.store.write("conversation", task.task_id, [[run.run_id, kind, { conversation_id: h.acpxRecordId, acpx_session_key: key, resumed: resume ?? null }]], () =>
      this.store.exec("UPDATE runs SET conversation_id = ? WHERE run_id = ?", h.acpxRecordId!, run.run_id),
    );
    return h;
  }

  /** The task's spawn marker, durable before acpx starts anything with it
   * (write-ahead): whatever acpx starts for the task carries it. */
  private async marker(task: Task, run: Run): Promise<string> {
    const have = this.store.liveProviders(task.task_id).find((p) => p.pid === null);
    if (have) return have.marker;
    const marker = newId("spawn");
    await this.store.write("provider_spawn_intent", task.task_id, [[run.run_id, "provider.spawn_intent", { marker }]], () =>
      this.store.exec("INSERT INTO providers(task_id, marker) VALUES (?, ?)", task.task_id, marker),
    );
    return marker;
  }

  /** Every accepted message no turn took yet becomes a turn (intent first)
   * and is submitted to acpx, which queues it behind the active turn. */
  private async submitQueued(task: Task, run: Run, session: AcpRuntimeHandle): Promise<void> {
    for (const m of this.store.queue(task.task_id)) {
      const turn = await this.intent(task, run, m.message_id, "primary", m.message_id);
      await this.submit(task, run, session, turn, m.text);
    }
  }

  private async intent(task: Task, run: Run, messageId: string, kind: "primary" | "continuation", clientId: string): Promise<Turn> {
    let row = 0;
    await this.store.write("turn_intent", task.task_id, [[run.run_id, "turn.intent", { message_id: messageId, kind, client_id: clientId }]], () => {
      this.store.exec(
        "INSERT INTO turns(run_id, task_id, message_id, kind, client_id, status) VALUES (?, ?, ?, ?, ?, 'intent')",
        run.run_id, task.task_id, messageId, kind, clientId,
      );
      row = this.store.lastInsertRow();
      if (kind === "primary") this.store.exec("UPDATE messages SET consumed_run = ? WHERE task_id = ? AND message_id = ?", run.run_id, task.task_id, messageId);
    });
    return this.store.turns(run.run_id).find((t) => t.turn_row === row)!;
  }

  /** Hands the turn to acpx under its client id as the request id; the
   * acceptance is written when acpx wrote the prompt to the agent. */
  private async submit(task: Task, run: Run, session: AcpRuntimeHandle, turn: Turn, text: string): Promise<void> {
    const marker = await this.marker(task, run);
    // acpx starts the queue owner with this process's environment.
    process.env[MARKER_ENV] = marker;
    this.sockets.claim();
    const t = this.acpx.runtime.startTurn({ handle: session, text: withMessageId(turn.client_id, text), mode: "prompt", requestId: turn.client_id });
    const flight: Flight = { result: t.result as Flight["result"], lastMs: Date.now(), accepted: Promise.resolve(), started: false };
    flight.accepted = t.promptStarted.then(
      async () => {
        flight.lastMs = Date.now();
        flight.started = true;
        await this.noteOwner(task, run, session);
        const now = this.store.turns(run.run_id).find((x) => x.turn_row === turn.turn_row);
        if (now?.status !== "intent") return;
        await this.store.write("turn_accepted", task.task_id, [[run.run_id, "turn.accepted", { turn_row: turn.turn_row, provider_turn_id: turn.client_id }]], () =>
          this.store.exec("UPDATE turns SET provider_turn_id = ?, status = 'accepted' WHERE turn_row = ?", turn.client_id, turn.turn_row),
        );
      },
      () => {},
    );
    void flight.accepted.catch(() => {});
    void (async () => {
      for await (const _ of t.events) flight.lastMs = Date.now();
    })().catch(() => {});
    this.flights.set(turn.client_id, flight);
  }

  /** Names the session's queue owner in the run log the first time this
   * store sees it (`provider.spawned`: the harness's provider faults at
   * runner points, and hygiene, find it there). */
  private async noteOwner(task: Task, run: Run, session: AcpRuntimeHandle): Promise<void> {
    const owner = this.acpx.owner(session.acpxRecordId!);
    if (!owner) return;
    const start = startTime(owner.pid);
    if (this.store.liveProviders(task.task_id).some((p) => p.pid === owner.pid && p.start_time === start)) return;
    const marker = await this.marker(task, run);
    const identity = { pid: owner.pid, pgid: owner.pid, start_time: start ?? 0 };
    await this.store.write("provider_identity", task.task_id, [[run.run_id, "provider.spawned", { ...identity, what: "acpx queue owner" }]], () =>
      this.store.exec("INSERT INTO providers(task_id, marker, pid, pgid, start_time) VALUES (?, ?, ?, ?, ?)", task.task_id, marker, owner.pid, owner.pid, start),
    );
  }

  /** Follows `turn` to its end: through its flight when this process
   * submitted it, else through acpx's journal; follow-ups accepted meanwhile
   * are submitted at once (acpx queues them). */
  private async follow(task: Task, run: Run, session: AcpRuntimeHandle, turn: Turn, actor: { again: boolean; wake: () => void }): Promise<void> {
    const recordId = session.acpxRecordId!;
    let journalSize = -1;
    let lastMs = Date.now();
    let resubmitted = false;
    for (;;) {
      const flight = this.flights.get(turn.client_id);
      const woken = new Promise<void>((resolve) => {
        actor.wake = resolve;
      });
      const tick = new Promise<void>((resolve) => setTimeout(resolve, FOLLOW_TICK_MS));
      const done = flight ? flight.result.then((r) => r, (e) => ({ status: "failed", error: { message: String(e) } })) : null;
      const r = await Promise.race([done ?? new Promise<never>(() => {}), woken.then(() => null), tick.then(() => null)]);
      if (actor.again) {
        actor.again = false;
        await this.submitQueued(task, run, session);
      }
      if (flight && r !== null) {
        this.flights.delete(turn.client_id);
        await flight.accepted;
        const res = r as Awaited<Flight["result"]>;
        if (res.status === "completed") return this.finished(task, run, turn, false);
        // Cancelled or failed: what acpx's journal and owner say decides.
        continue;
      }
      if (flight) {
        // Before the prompt reaches the agent, acpx is starting its owner
        // and the agent and reconnecting the session (seconds, under load):
        // bounded by START_MS, not by the idle timeout.
        const bound = flight.started ? this.idleMs : START_MS;
        if (Date.now() - flight.lastMs > bound) await this.unresponsive(task, run, session, Date.now() - flight.lastMs);
        continue;
      }
      // Not submitted by this process, or its submission ended unsettled.
      const now = this.store.turns(run.run_id).find((t) => t.turn_row === turn.turn_row)!;
      const { outcome, size, echoed } = this.acpx.outcome(recordId, now.client_id);
      const owner = this.acpx.owner(recordId);
      if (owner) await this.noteOwner(task, run, session);
      if (size !== journalSize) {
        journalSize = size;
        lastMs = Date.now();
      }
      if (outcome.kind === "started" && owner) {
        if (Date.now() - lastMs > this.idleMs) await this.unresponsive(task, run, session, Date.now() - lastMs);
        continue;
      }
      if (outcome.kind === "none" && owner && !resubmitted) {
        // Maybe still in the owner's queue: acpx refuses a request id it
        // holds (QUEUE_REQUEST_DUPLICATE), so submitting again is safe.
        resubmitted = true;
        await this.resubmit(task, run, session, now);
        continue;
      }
      if (outcome.kind === "none" && owner) {
        if (Date.now() - lastMs > this.idleMs) await this.unresponsive(task, run, session, Date.now() - lastMs);
        continue;
      }
      return this.recover(task, run, session, now, outcome, echoed);
    }
  }

  /** A submission again of a turn acpx's journal never started. */
  private async resubmit(task: Task, run: Run, session: AcpRuntimeHandle, turn: Turn): Promise<void> {
    const message = this.store.message(task.task_id, turn.message_id)!;
    await this.submit(task, run, session, turn, turn.kind === "continuation" ? CONTINUE_TEXT : message.text);
  }

  /** A turn whose result this process did not see, its owner gone: acpx's
   * journal in the place of the agent's replay (recovery.ts). */
  private async recover(task: Task, run: Run, session: AcpRuntimeHandle, turn: Turn, outcome: Outcome, echoed: boolean): Promise<void> {
    // A run whose session acpx lost (a power cut: acpx syncs nothing) has no
    // journal to tell "never began" from "began": nothing is absent then.
    const lost = this.restored.has(run.run_id);
    const found: Found =
      outcome.kind === "completed" ? "completed" : echoed ? "recorded" : outcome.kind === "none" && !lost ? "absent" : "unknown";
    const d = classify(turn.kind === "continuation" ? "continuation" : turn.status === "accepted" ? "accepted" : "intent", found);
    switch (d.do) {
      case "adopt":
        return this.finished(task, run, turn, true);
      case "fail":
        throw new Fail(d.code, `${d.message} (acpx: ${describe(outcome)})`);
      case "send": {
        const sent = (this.sends.get(turn.client_id) ?? 0) + 1;
        this.sends.set(turn.client_id, sent);
        if (sent > SENDS_MAX) throw new Fail("provider_start_failed", `acpx did not run turn ${turn.client_id} in ${SENDS_MAX} submissions (acpx: ${describe(outcome)})`);
        if (turn.status === "accepted") {
          await this.store.write("turn_absent", task.task_id, [[run.run_id, "turn.absent_at_provider", { message_id: turn.message_id, provider_turn_id: turn.provider_turn_id, action: "the agent's echo is not in acpx's journal; submit it once more" }]], () =>
            this.store.exec("UPDATE turns SET provider_turn_id = NULL, status = 'intent' WHERE turn_row = ?", turn.turn_row),
          );
        }
        return this.resubmit(task, run, session, { ...turn, provider_turn_id: null, status: "intent" });
      }
      case "continue": {
        const cause: Cause = { code: "provider_turn_lost_on_restore", recoverable: true, message: `turn ${turn.client_id} was lost with acpx's queue owner (acpx: ${describe(outcome)}); it is continued once` };
        const clientId = `${turn.message_id}#continuation`;
        let row = 0;
        await this.store.write(
          "turn_intent",
          task.task_id,
          [
            [run.run_id, "turn.failed", { turn_row: turn.turn_row, provider_turn_id: turn.provider_turn_id, status: "interrupted", cause }],
            [run.run_id, "turn.intent", { message_id: turn.message_id, kind: "continuation", client_id: clientId }],
          ],
          () => {
            this.store.exec("UPDATE turns SET status = 'interrupted' WHERE turn_row = ?", turn.turn_row);
            this.store.exec(
              "INSERT INTO turns(run_id, task_id, message_id, kind, client_id, status) VALUES (?, ?, ?, 'continuation', ?, 'intent')",
              run.run_id, task.task_id, turn.message_id, clientId,
            );
            row = this.store.lastInsertRow();
          },
        );
        const continuation = this.store.turns(run.run_id).find((t) => t.turn_row === row)!;
        return this.submit(task, run, session, continuation, CONTINUE_TEXT);
      }
    }
  }

  private async finished(task: Task, run: Run, turn: Turn, adopted: boolean): Promise<void> {
    await this.store.write("turn_ended", task.task_id, [[run.run_id, "turn.finished", { turn_row: turn.turn_row, provider_turn_id: turn.client_id, status: "completed", adopted }]], () =>
      this.store.exec("UPDATE turns SET status = 'completed' WHERE turn_row = ?", turn.turn_row),
    );
  }

  /** An owner silent for the idle timeout during a turn: recorded, then
   * stopped (group and marker); the turn is then looked up as after any
   * lost owner. */
  private async unresponsive(task: Task, run: Run, session: AcpRuntimeHandle, idleMs: number): Promise<void> {
    const owner = this.acpx.owner(session.acpxRecordId!);
    await this.store.write("provider_lost", task.task_id, [[run.run_id, "provider_unresponsive", { pid: owner?.pid ?? null, idle_ms: idleMs, detail: "acpx journaled nothing of the turn" }]]);
    await this.stopAll(task, run.run_id);
    for (const [id, f] of this.flights) {
      if (this.store.turns(run.run_id).some((t) => t.client_id === id)) {
        void f.result.catch(() => {});
        this.flights.delete(id);
      }
    }
  }

  /** Stops every acpx process of the task: each owner named in the run log
   * (its group: the agent is in it), then everything carrying any marker the
   * task ever had; records each stop of a process the run log named. Throws
   * when something survives SIGKILL. */
  private async stopAll(task: Task, runId: string): Promise<void> {
    const rows = this.store.liveProviders(task.task_id);
    const events: Array<[string, string, Record<string, unknown>]> = [];
    for (const p of rows) {
      if (p.pid !== null && aliveSame(p.pid, p.start_time)) await sweep(p.pgid, p.marker, 2000);
    }
    let killed = 0;
    for (const marker of this.store.markers(task.task_id)) {
      const swept = await sweep(null, marker, 2000);
      killed += swept.killed;
      if (swept.survivors.length > 0) throw new Fail("cleanup_quarantined", `processes ${swept.survivors.join(", ")} of acpx survived SIGKILL`);
    }
    for (const p of rows) {
      events.push(
        p.pid === null
          ? [runId, "provider.spawn_swept", { marker: p.marker, killed }]
          : [runId, "provider.stopped", { identity: { pid: p.pid, pgid: p.pgid, start_time: p.start_time }, marked_killed: killed }],
      );
    }
    if (events.length === 0) return;
    await this.store.write("provider_stop", task.task_id, events, () => this.store.exec("UPDATE providers SET stopped = 1 WHERE task_id = ?", task.task_id));
  }

  /** Settles the run (and the task): acpx's processes of the task stopped first. */
  async settle(task: Task, run: Run, cause: Cause | null): Promise<void> {
    let c = cause;
    try {
      await this.stopAll(task, run.run_id);
    } catch (e) {
      if (!(e instanceof Fail)) throw e;
      c = { code: e.code, recoverable: false, message: e.message };
    }
    const state = c === null ? "completed" : c.code === "cleanup_quarantined" ? "needs_human" : "failed";
    const text = c ? JSON.stringify(c) : null;
    const stranded: [string, string, Record<string, unknown>][] =
      state === "failed"
        ? [
            ...this.store.queue(task.task_id).map((m) => m.message_id),
            ...this.store.turns(run.run_id).filter((t) => t.kind === "primary" && t.status === "intent").map((t) => t.message_id),
          ].map((id) => [run.run_id, "message.stranded", { message_id: id, cause: c, waits_for: "retry" }])
        : [];
    await this.store.write("run_settled", task.task_id, [...stranded, [run.run_id, "run.settled", { state, cause: c }]], () => {
      this.store.exec("UPDATE runs SET status = ?, cause = ? WHERE run_id = ?", state === "completed" ? "completed" : "failed", text, run.run_id);
      this.store.exec("UPDATE tasks SET state = ?, cause = ? WHERE task_id = ?", state, text, task.task_id);
    });
    this.releaseSockets();
  }

  /** Admits a Retry of a failed task (acpx has none: this is the runner's):
   * every acpx process of the task stopped, then a fresh run in a fresh
   * acpx session that re-sends the failed message under the Retry's id. */
  async retry(task: Task, messageId: string): Promise<{ status: number; body: object }> {
    const known = this.store.message(task.task_id, messageId);
    if (known?.kind === "retry") return { status: 201, body: { task_id: task.task_id, run_id: known.answer } };
    if (task.state === "running") return { status: 409, body: { block_reason: "execution_active" } };
    if (task.state !== "failed" || known) return { status: 409, body: { block_reason: "nothing_to_retry" } };
    const failed = this.store.run(task.current_run)!;
    const resend = this.retryMessage(task);
    const runId = newId("run");
    const earlier = this.store.liveProviders(task.task_id).map((p) => ({ pid: p.pid, start_time: p.start_time }));
    try {
      await this.stopAll(task, failed.run_id);
    } catch (e) {
      if (e instanceof Fail) return { status: 409, body: { block_reason: "process_running" } };
      throw e;
    }
    await this.store.write(
      "retry_admitted",
      task.task_id,
      [
        [failed.run_id, "stopped_conversation_verified", { providers_stopped: earlier, still_alive: 0 }],
        [runId, "retry.admitted", {
          message_id: messageId, run_id: runId, previous_run: failed.run_id, resends: resend !== null,
          resends_message: resend?.message_id ?? null, delivers: this.store.queue(task.task_id).map((m) => m.message_id),
        }],
      ],
      () => {
        this.store.exec(
          "INSERT INTO messages(task_id, message_id, kind, text, ord, answer, consumed_run) VALUES (?, ?, 'retry', ?, 0, ?, ?)",
          task.task_id, messageId, resend?.text ?? "", runId, resend === null ? runId : null,
        );
        this.store.exec(
          "INSERT INTO runs(run_id, task_id, kind, trigger_message_id, status, owner_epoch, created_ms) VALUES (?, ?, 'retry', ?, 'running', ?, ?)",
          runId, task.task_id, messageId, this.store.epoch, Date.now(),
        );
        this.store.exec("UPDATE tasks SET state = 'running', cause = NULL, current_run = ? WHERE task_id = ?", runId, task.task_id);
      },
    );
    this.wake(task.task_id);
    return { status: 201, body: { task_id: task.task_id, run_id: runId } };
  }

  /** What a Retry re-sends (runnerd's rule, as in ts-runner). */
  private retryMessage(task: Task): Message | null {
    const turns = this.store.runs(task.task_id).flatMap((r) => this.store.turns(r.run_id));
    const primary = turns.filter((t) => t.kind === "primary").at(-1);
    const last = primary && turns.filter((t) => t.message_id === primary.message_id).at(-1);
    if (primary && last && last.status !== "completed") return this.store.message(task.task_id, primary.message_id)!;
    if (this.store.queue(task.task_id).length > 0) return null;
    if (primary) return this.store.message(task.task_id, primary.message_id)!;
    return this.store.message(task.task_id, this.store.run(task.current_run)!.trigger_message_id)!;
  }

  /** After a start: every task that was running goes on. */
  recoverAll(): void {
    for (const taskId of this.store.runningTasks()) this.wake(taskId);
  }
}

/** The shared runtime's handle of a stored session (acpx rebuilds nothing
 * else from it). */
function handle(recordId: string, cwd: string): AcpRuntimeHandle {
  return { backend: "acpx-shared", sessionKey: "", runtimeSessionName: recordId, acpxRecordId: recordId, cwd } as AcpRuntimeHandle;
}

function describe(o: Outcome): string {
  switch (o.kind) {
    case "none":
      return "no turn_started in the journal";
    case "started":
      return "turn_started, no turn_result";
    case "completed":
      return `turn_result completed (${o.stopReason})`;
    case "cancelled":
      return "turn_result cancelled";
    case "failed":
      return `turn_result failed ${o.detailCode ?? ""}: ${o.message}`;
  }
}
