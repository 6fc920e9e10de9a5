// The engine: one actor per task, which decides every step from what the
// store holds (never from memory), so the same code runs in steady state and
// after a restart. A step is: start the run's provider if needed, open or
// resume the conversation, then either finish an unfinished turn or start the
// next queued message as a turn (write-ahead: the intent is durable before
// turn/start, the acceptance before the turn's events are read), and settle
// the run when nothing is left. A turn left unfinished by a crash or a lost
// provider is looked up at the provider and classified (recovery.ts) before
// anything is sent again. Providers run in process groups of their own (a
// runner crash leaves them running, as it would in production), carry a spawn
// marker (processes.ts), and are stopped with proof before a runner process
// uses the task's conversation ("old provider first").

import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import * as cut from "../../cutpoint-clients/node/cutpoint.mjs";
import { Codex, ProviderLost, RpcError } from "./codex.ts";
import { MARKER_ENV, aliveSame, startTime, sweep } from "./processes.ts";
import { classify, type Found, type TurnState } from "./recovery.ts";
import { StorageError, type Cause, type Message, type Run, type Store, type Task, type Turn } from "./store.ts";

export type Profile = { driver: string; command: string[]; approval: string; credential_env: string };
export type Options = { stateDir: string; idleMs: number; termGraceMs: number; profiles: Map<string, Profile> };

/** A provider this runner process started, with its client. */
type Live = { child: ChildProcess; codex: Codex; row: number; marker: string; pid: number; pgid: number; start_time: number; loaded: Set<string> };

/** The causes after which trying the same work again can succeed with
 * nothing changed (docs/recovery-contract.md, Causes: `recoverable`). */
const RECOVERABLE = new Set([
  "provider_turn_lost_on_restore",
  "upstream_rate_limited",
  "upstream_overloaded",
  "upstream_server_error",
  "upstream_stream_broken",
]);

/** The causes whose run leaves its latest message answered by no one: the
 * model API failed the turn, or its lookup failed; it waits for a Retry. */
const UNANSWERED = new Set([
  "upstream_rate_limited",
  "upstream_overloaded",
  "upstream_server_error",
  "upstream_stream_broken",
  "upstream_unauthorized",
  "context_window_exceeded",
  "provider_lookup_failed",
]);

/** The model API's status as the contract's cause (runnerd's
 * `driver::upstream_cause`). */
function statusCause(status: number, message: string): string | null {
  if (status === 429) return "upstream_rate_limited";
  if (status === 503 || status === 529) return "upstream_overloaded";
  if (status >= 500 && status <= 599) return "upstream_server_error";
  if (status === 401 || status === 403) return "upstream_unauthorized";
  if (status === 400 && /context window|context_length/.test(message)) return "context_window_exceeded";
  return null;
}

/** The contract's cause of a turn Codex failed with `codexErrorInfo`
 * (runnerd's `driver::codex::codex_error_cause`). */
export function codexErrorCause(error: any): string | null {
  const info = error?.codexErrorInfo;
  const message: string = error?.message ?? "";
  if (typeof info === "string") {
    const named: Record<string, string> = {
      rateLimitExceeded: "upstream_rate_limited",
      usageLimitExceeded: "upstream_rate_limited",
      serverOverloaded: "upstream_overloaded",
      internalServerError: "upstream_server_error",
      unauthorized: "upstream_unauthorized",
      contextWindowExceeded: "context_window_exceeded",
    };
    return named[info] ?? null;
  }
  if (info === null || typeof info !== "object") return null;
  const [kind, detail] = Object.entries(info)[0] ?? [];
  const status = (detail as any)?.httpStatusCode;
  const byStatus = typeof status === "number" ? statusCause(status, message) : null;
  if (byStatus) return byStatus;
  return kind === "responseStreamDisconnected" || kind === "responseStreamConnectionFailed" ? "upstream_stream_broken" : null;
}

/** A step that must fail the run with this cause. */
class Fail extends Error {
  code: string;
  constructor(code: string, message: string) {
    super(message);
    this.code = code;
  }
}

export function newId(prefix: string): string {
  return `${prefix}-${randomUUID().replaceAll("-", "")}`;
}

/** The continuation's text (wire::marker::CONTINUE_TEXT): never the message again. */
export const CONTINUE_TEXT =
  "[turncut:continue] The previous turn was interrupted by a restart. Continue it; do not redo finished steps. [turncut:check-aborted] A command reported as aborted may have run before the restart: check whether its effect is already there before running it again.";

/** Providers a run may lose in one runner process; the next loss fails it
 * provider_start_failed (runnerd's PROVIDER_LOSSES_MAX). */
const LOST_PROVIDERS_MAX = 4;

/** How long a new provider may take to answer `initialize`. */
const PROVIDER_START_MS = 5_000;

export class Engine {
  private live = new Map<string, Live>();
  private actors = new Map<string, { again: boolean }>();
  /** Providers lost per run in this process (a bound, not a record). */
  private lost = new Map<string, number>();

  readonly store: Store;
  readonly opts: Options;

  constructor(store: Store, opts: Options) {
    this.store = store;
    this.opts = opts;
  }

  /** Makes the task's actor take another step (starting it if idle). */
  wake(taskId: string): void {
    const actor = this.actors.get(taskId);
    if (actor) {
      actor.again = true;
      return;
    }
    const state = { again: true };
    this.actors.set(taskId, state);
    void (async () => {
      try {
        while (state.again) {
          state.again = false;
          while (await this.step(taskId)) {}
        }
      } finally {
        this.actors.delete(taskId);
      }
    })();
  }

  /** One step; true while there is more to do. */
  private async step(taskId: string): Promise<boolean> {
    const task = this.store.task(taskId);
    if (!task || task.state !== "running") return false;
    const run = this.store.run(task.current_run)!;
    try {
      // Old provider first: whatever an earlier runner process started for
      // this task is stopped, with proof, before the conversation is used.
      if (!this.live.has(taskId)) await this.stopOld(task, run.run_id);
      const unfinished = this.store.turns(run.run_id).find((t) => t.status === "intent" || t.status === "accepted");
      if (unfinished) {
        await this.resumeTurn(task, run, unfinished);
        return true;
      }
      const next = this.store.queue(taskId)[0];
      if (!next) {
        await this.settle(task, run, null);
        return false;
      }
      const turn = await this.intent(task, run, next.message_id, next.text);
      await this.runTurn(task, run, turn, next.text);
      return true;
    } catch (e) {
      return this.stepFailed(task, run, e);
    }
  }

  /** A step's error: a lost provider is recovered by the next step; any
   * other error fails the run with its cause. */
  private async stepFailed(task: Task, run: Run, error: unknown): Promise<boolean> {
    let e = error;
    const live = this.live.get(task.task_id);
    if (e instanceof ProviderLost) {
      const lost = (this.lost.get(run.run_id) ?? 0) + 1;
      this.lost.set(run.run_id, lost);
      try {
        if (live) await this.stopLive(task.task_id, run.run_id, e.kind, e.message);
        if (lost <= LOST_PROVIDERS_MAX) return true;
        e = new Fail("provider_start_failed", `the run lost ${lost} providers: ${e.message}`);
      } catch (again) {
        e = again;
      }
    }
    const cause: Cause =
      e instanceof StorageError
        ? { code: "storage_failed", recoverable: false, message: e.message }
        : e instanceof Fail
          ? { code: e.code, recoverable: RECOVERABLE.has(e.code), message: e.message }
          : { code: "provider_protocol_error", recoverable: false, message: String((e as Error).message ?? e) };
    try {
      if (this.live.has(task.task_id)) await this.stopLive(task.task_id, run.run_id, null, "");
      await this.settle(task, run, cause);
    } catch (again) {
      process.stderr.write(`ts-runner: task ${task.task_id}: could not record ${cause.code}: ${again}\n`);
    }
    return false;
  }

  /** The turn intent: durable before the provider ever sees the turn; it
   * consumes the message. */
  private async intent(task: Task, run: Run, messageId: string, _text: string): Promise<Turn> {
    let row = 0;
    await this.store.write("turn_intent", task.task_id, [[run.run_id, "turn.intent", { message_id: messageId, kind: "primary", client_id: messageId }]], () => {
      this.store.exec(
        "INSERT INTO turns(run_id, task_id, message_id, kind, client_id, status) VALUES (?, ?, ?, 'primary', ?, 'intent')",
        run.run_id,
        task.task_id,
        messageId,
        messageId,
      );
      row = this.store.lastInsertRow();
      this.store.exec("UPDATE messages SET consumed_run = ? WHERE task_id = ? AND message_id = ?", run.run_id, task.task_id, messageId);
    });
    return this.store.turns(run.run_id).find((t) => t.turn_row === row)!;
  }

  /** A turn left unfinished by a crash or a lost provider: ask the provider
   * what it recorded, then adopt, continue once, send (the provider never
   * recorded it), or fail closed (recovery.ts). */
  private async resumeTurn(task: Task, run: Run, turn: Turn): Promise<void> {
    const live = await this.provider(task, run);
    const thread = await this.conversation(task, run, live);
    const turns = await this.readTurns(live, thread);
    const state: TurnState =
      turn.kind === "continuation" ? { kind: "continuation" } : turn.provider_turn_id ? { kind: "accepted", providerTurnId: turn.provider_turn_id } : { kind: "intent" };
    const match = turns.find((t) =>
      turn.provider_turn_id ? t.id === turn.provider_turn_id : (t.items ?? []).some((i: any) => i.type === "userMessage" && i.clientId === turn.client_id),
    );
    const found: Found = match ? { recorded: (match.items ?? []).some((i: any) => i.type === "userMessage"), status: match.status } : null;
    const decision = classify(state, found, this.approvalOpen(task.task_id, turn.turn_row), this.outputHeld(task.task_id, run.run_id, turn.turn_row));
    const message = this.store.message(task.task_id, turn.message_id)!;
    switch (decision.do) {
      case "adopt":
        await this.store.write("turn_ended", task.task_id, [[run.run_id, "turn.finished", { turn_row: turn.turn_row, provider_turn_id: turn.provider_turn_id, status: "completed", adopted: true }]], () =>
          this.store.exec("UPDATE turns SET status = 'completed' WHERE turn_row = ?", turn.turn_row),
        );
        return;
      case "fail":
        throw new Fail(decision.code, decision.message);
      case "send":
        // The turn is an intent again in the same write: cut before the
        // re-send's acceptance, it is looked up by its client id, not by a
        // turn id the provider never had (which would send it a third time).
        await this.store.write("turn_absent", task.task_id, [[run.run_id, "turn.absent_at_provider", { message_id: turn.message_id, provider_turn_id: turn.provider_turn_id, action: "the provider never recorded it; send it once" }]], () =>
          this.store.exec("UPDATE turns SET provider_turn_id = NULL, status = 'intent' WHERE turn_row = ?", turn.turn_row),
        );
        return this.runTurn(task, run, { ...turn, provider_turn_id: null, status: "intent" }, turn.kind === "continuation" ? CONTINUE_TEXT : message.text, live, thread);
      case "continue":
        return this.continueOnce(task, run, turn, live, thread);
    }
  }

  /** The thread's turns; a thread never written has none. */
  private async readTurns(live: Live, thread: string): Promise<any[]> {
    try {
      return await live.codex.readTurns(thread);
    } catch (e) {
      if (e instanceof RpcError && e.message.includes("not supported yet")) return [];
      // The provider answered the lookup with an error: whether it recorded
      // the turn is unknown, so it is neither sent again nor continued.
      if (e instanceof RpcError) throw new Fail("provider_lookup_failed", `thread/read failed: ${e.message}`);
      throw e;
    }
  }

  /** Whether the run log holds output of turn `turnRow` (or, with none, of
   * any turn of the run): an item completed or a request made — a model saw
   * the message, so a provider without its record lost it. */
  private outputHeld(taskId: string, runId: string, turnRow?: number): boolean {
    return this.store
      .events(taskId, 0)
      .some((e) => e.run_id === runId && (e.kind === "item.completed" || e.kind === "provider_request") && (turnRow === undefined || e.data.turn_row === turnRow));
  }

  /** Whether the turn had an approval requested and never answered, or
   * answered accept for a command item that never completed (the run log). */
  private approvalOpen(taskId: string, turnRow: number): boolean {
    const events = this.store.events(taskId, 0).filter((e) => e.data.turn_row === turnRow);
    const last = new Map<string, Record<string, unknown>>();
    for (const e of events) if (e.kind === "provider_request") last.set(String(e.data.request_id), e.data);
    const completed = new Set(events.filter((e) => e.kind === "item.completed").map((e) => (e.data.item as { id?: string }).id));
    return [...last.values()].some((r) => r.status !== "answered" || (String(r.decision).startsWith("accept") && !completed.has(r.item_id as string)));
  }

  /** The lost turn marked interrupted and its one continuation written
   * ahead, in one write; then the continuation text is sent. */
  private async continueOnce(task: Task, run: Run, turn: Turn, live: Live, thread: string): Promise<void> {
    const cause: Cause = { code: "provider_turn_lost_on_restore", recoverable: true, message: `turn ${turn.provider_turn_id} was lost with its provider; it is continued once` };
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
    await this.runTurn(task, run, continuation, CONTINUE_TEXT, live, thread);
  }

  /** Sends the turn and follows it to its end. */
  private async runTurn(task: Task, run: Run, turn: Turn, text: string, have?: Live, haveThread?: string): Promise<void> {
    const live = have ?? (await this.provider(task, run));
    const thread = haveThread ?? (await this.conversation(task, run, live));
    const providerTurn = await live.codex.startTurn(thread, text, turn.client_id);
    await this.store.write("turn_accepted", task.task_id, [[run.run_id, "turn.accepted", { turn_row: turn.turn_row, provider_turn_id: providerTurn }]], () =>
      this.store.exec("UPDATE turns SET provider_turn_id = ?, status = 'accepted' WHERE turn_row = ?", providerTurn, turn.turn_row),
    );
    for (;;) {
      const msg = await live.codex.next();
      if (msg.method === "item/completed" && msg.params?.turnId === providerTurn) {
        const it = msg.params.item ?? {};
        const item = Object.fromEntries(["type", "id", "status", "text", "exitCode", "clientId"].filter((k) => k in it).map((k) => [k, it[k]]));
        await this.store.write("item", task.task_id, [[run.run_id, "item.completed", { turn_row: turn.turn_row, item }]]);
      } else if (msg.method === "item/commandExecution/requestApproval" && msg.id !== undefined) {
        await this.approve(task, run, turn, live, msg);
      } else if (msg.method === "turn/completed" && msg.params?.turn?.id === providerTurn) {
        const status: string = msg.params.turn.status;
        const done = status === "completed";
        await this.store.write("turn_ended", task.task_id, [[run.run_id, done ? "turn.finished" : "turn.failed", { turn_row: turn.turn_row, provider_turn_id: providerTurn, status }]], () =>
          this.store.exec("UPDATE turns SET status = ? WHERE turn_row = ?", done ? "completed" : "failed", turn.turn_row),
        );
        // A turn Codex failed upstream (after its own retries) settles with
        // that cause; the runner never sends it again by itself: the thread
        // holds the message, so the model would see it twice.
        if (!done) throw new Fail(codexErrorCause(msg.params.turn.error) ?? "provider_protocol_error", `the provider ended turn ${providerTurn} ${status}`);
        return;
      } else if (msg.id !== undefined && msg.method !== undefined) {
        live.codex.send({ id: msg.id, error: { code: -32601, message: `ts-runner does not handle ${msg.method}` } });
      }
    }
  }

  /** An approval: recorded, decided, answered, each step durable first. */
  private async approve(task: Task, run: Run, turn: Turn, live: Live, msg: { id?: number | string; method?: string; params?: any }): Promise<void> {
    const decision = this.opts.profiles.get(task.profile)!.approval;
    const base = { turn_row: turn.turn_row, request_id: String(msg.id), method: msg.method, item_id: msg.params?.itemId };
    await this.store.write("approval_request", task.task_id, [[run.run_id, "provider_request", { ...base, status: "requested", decision: null }]]);
    await this.store.write("approval_intent", task.task_id, [[run.run_id, "provider_request", { ...base, status: "answering", decision }]]);
    live.codex.answer(msg.id!, decision);
    await this.store.write("approval_answer", task.task_id, [[run.run_id, "provider_request", { ...base, status: "answered", decision }]]);
  }

  /** The run's conversation: opened once (durable), resumed in a new provider. */
  private async conversation(task: Task, run: Run, live: Live): Promise<string> {
    const current = this.store.run(run.run_id)!;
    if (current.conversation_id === null) {
      const thread = await live.codex.startThread(task.workspace);
      await this.store.write("conversation", task.task_id, [[run.run_id, "conversation.opened", { conversation_id: thread }]], () =>
        this.store.exec("UPDATE runs SET conversation_id = ? WHERE run_id = ?", thread, run.run_id),
      );
      live.loaded.add(thread);
      return thread;
    }
    if (!live.loaded.has(current.conversation_id)) {
      try {
        await live.codex.resumeThread(current.conversation_id, task.workspace);
      } catch (e) {
        if (e instanceof RpcError && !e.message.startsWith("no rollout found")) throw new Fail("provider_lookup_failed", `thread/resume failed: ${e.message}`);
        if (!(e instanceof RpcError)) throw e;
        // Codex writes a thread with its first turn: a thread the provider
        // never wrote is forgotten and a fresh one opened, unless a turn of
        // the run had completed in it or the run log holds a turn's output
        // (then history is lost: a power cut took an unsynced thread).
        if (this.store.turns(run.run_id).some((t) => t.status === "completed") || this.outputHeld(task.task_id, run.run_id)) {
          throw new Fail("provider_protocol_error", `the provider lost conversation ${current.conversation_id}, which has completed turns or output the runner holds`);
        }
        await this.store.write("conversation_lost", task.task_id, [[run.run_id, "conversation.lost", { conversation_id: current.conversation_id, action: "open a fresh conversation" }]], () =>
          this.store.exec("UPDATE runs SET conversation_id = NULL WHERE run_id = ?", run.run_id),
        );
        return this.conversation(task, run, live);
      }
      live.loaded.add(current.conversation_id);
    }
    return current.conversation_id;
  }

  /** The task's provider in this runner process, started (and recorded) if needed. */
  private async provider(task: Task, run: Run): Promise<Live> {
    const have = this.live.get(task.task_id);
    if (have) return have;
    const profile = this.opts.profiles.get(task.profile)!;
    const providerDir = join(this.opts.stateDir, "providers", encodeURIComponent(task.task_id));
    mkdirSync(providerDir, { recursive: true });
    const argv = profile.command.map((a) =>
      a.replaceAll("{provider_dir}", providerDir).replaceAll("{workspace}", task.workspace).replaceAll("{task_id}", task.task_id),
    );
    // Write-ahead: the marker is durable before the process exists.
    const marker = newId("spawn");
    let row = 0;
    await this.store.write("provider_spawn_intent", task.task_id, [[run.run_id, "provider.spawn_intent", { marker }]], () => {
      this.store.exec("INSERT INTO providers(task_id, marker) VALUES (?, ?)", task.task_id, marker);
      row = this.store.lastInsertRow();
    });
    const child = spawn(argv[0], argv.slice(1), {
      cwd: task.workspace,
      stdio: ["pipe", "pipe", "inherit"],
      detached: true,
      env: { ...process.env, TURNCUT_ROLE: "provider", [MARKER_ENV]: marker },
    });
    const spawned = await new Promise<boolean>((resolve) => {
      child.once("spawn", () => resolve(true));
      child.once("error", () => resolve(false));
    });
    if (!spawned) throw new Fail("provider_start_failed", `cannot start ${argv[0]}`);
    await cut.hit("runner.provider.spawned");
    const pid = child.pid!;
    const identity = { pid, pgid: pid, start_time: startTime(pid) ?? 0 };
    await this.store.write("provider_identity", task.task_id, [[run.run_id, "provider.spawned", identity]], () =>
      this.store.exec("UPDATE providers SET pid = ?, pgid = ?, start_time = ? WHERE row = ?", pid, pid, identity.start_time, row),
    );
    const live: Live = { child, codex: new Codex(child, this.opts.idleMs), row, marker, ...identity, loaded: new Set() };
    this.live.set(task.task_id, live);
    try {
      await live.codex.initialize(PROVIDER_START_MS);
    } catch (e) {
      if (e instanceof RpcError) throw new Fail("provider_start_failed", `initialize: ${e.message}`);
      throw e;
    }
    return live;
  }

  /** Stops this process's provider of the task (stdin closed, SIGTERM, then
   * SIGKILL to its group) and records the stop. */
  private async stopLive(taskId: string, runId: string, lost: string | null, detail: string): Promise<void> {
    const live = this.live.get(taskId)!;
    this.live.delete(taskId);
    const exited = new Promise<void>((resolve) => {
      if (live.child.exitCode !== null || live.child.signalCode !== null) resolve();
      else live.child.once("exit", () => resolve());
    });
    live.child.stdin!.end();
    const signals: string[] = [];
    for (const [signal, waitMs] of [["SIGTERM", this.opts.termGraceMs], ["SIGKILL", 2000]] as const) {
      const gone = await Promise.race([exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), signals.length === 0 ? 50 : waitMs))]);
      if (gone) break;
      signals.push(signal);
      try {
        process.kill(-live.pgid, signal);
      } catch {}
    }
    await exited;
    // What it started in other sessions carries its marker.
    const swept = await sweep(live.pgid, live.marker, 2000);
    if (swept.survivors.length > 0) throw new Fail("cleanup_quarantined", `processes ${swept.survivors.join(", ")} of provider ${live.pid} survived SIGKILL`);
    const events: Array<[string, string, Record<string, unknown>]> = [];
    if (lost) events.push([runId, lost, { pid: live.pid, detail }]);
    events.push([runId, "provider.stopped", { identity: { pid: live.pid, pgid: live.pgid, start_time: live.start_time }, signals, marked_killed: swept.killed }]);
    await this.store.write("provider_stop", taskId, events, () => this.store.exec("UPDATE providers SET stopped = 1 WHERE row = ?", live.row));
  }

  /** Stops every provider an earlier runner process started for the task
   * (its group if the same process is still there, then everything with its
   * marker) and records each stop; throws when one cannot be stopped. */
  private async stopOld(task: Task, runId: string): Promise<void> {
    for (const p of this.store.liveProviders(task.task_id)) {
      const same = p.pid !== null && aliveSame(p.pid, p.start_time);
      const swept = await sweep(same ? p.pgid : null, p.marker, 2000);
      if (swept.survivors.length > 0) throw new Fail("cleanup_quarantined", `processes ${swept.survivors.join(", ")} of an earlier provider survived SIGKILL`);
      const event: [string, string, Record<string, unknown>] =
        p.pid === null
          ? [runId, "provider.spawn_swept", { marker: p.marker, killed: swept.killed }]
          : [runId, "provider.stopped", { identity: { pid: p.pid, pgid: p.pgid, start_time: p.start_time }, method: "swept after a restart", marked_killed: swept.killed }];
      await this.store.write("provider_stop", task.task_id, [event], () => this.store.exec("UPDATE providers SET stopped = 1 WHERE row = ?", p.row));
    }
  }

  /** Settles the run (and the task): its provider stopped first. */
  async settle(task: Task, run: Run, cause: Cause | null): Promise<void> {
    if (this.live.has(task.task_id)) await this.stopLive(task.task_id, run.run_id, null, "");
    const state = cause === null ? "completed" : cause.code === "cleanup_quarantined" ? "needs_human" : "failed";
    const text = cause ? JSON.stringify(cause) : null;
    // Every message still queued when a run settles failed is named, with
    // what it waits for: a Retry delivers it (no-loss reads these).
    // So is the message of a turn that failed answering nothing (the model
    // API failed it, or its lookup failed): a Retry re-sends it.
    const waiting = state === "failed" ? this.store.queue(task.task_id).map((m) => m.message_id) : [];
    const last = this.store.turns(run.run_id).filter((t) => t.kind === "primary").at(-1);
    if (state === "failed" && cause && UNANSWERED.has(cause.code) && last && !waiting.includes(last.message_id)) waiting.unshift(last.message_id);
    const stranded: [string, string, Record<string, unknown>][] = waiting.map((m) => [run.run_id, "message.stranded", { message_id: m, cause, waits_for: "retry" }]);
    await this.store.write("run_settled", task.task_id, [...stranded, [run.run_id, "run.settled", { state, cause }]], () => {
      this.store.exec("UPDATE runs SET status = ?, cause = ? WHERE run_id = ?", state === "completed" ? "completed" : "failed", text, run.run_id);
      this.store.exec("UPDATE tasks SET state = ?, cause = ? WHERE task_id = ?", state, text, task.task_id);
    });
  }

  /** Admits a Retry of a failed task: every provider of the task stopped,
   * then a fresh run (and conversation) that re-sends the failed message
   * under the Retry's id. */
  async retry(task: Task, messageId: string): Promise<{ status: number; body: object }> {
    const known = this.store.message(task.task_id, messageId);
    if (known?.kind === "retry") return { status: 201, body: { task_id: task.task_id, run_id: known.answer } };
    if (task.state === "running") return { status: 409, body: { block_reason: "execution_active" } };
    if (task.state !== "failed" || known) return { status: 409, body: { block_reason: "nothing_to_retry" } };
    const failed = this.store.run(task.current_run)!;
    const resend = this.retryMessage(task);
    const runId = newId("run");
    // The stop proof: every provider the task ever had is gone.
    const earlier = this.store.liveProviders(task.task_id).map((p) => ({ pid: p.pid, start_time: p.start_time }));
    try {
      await this.stopOld(task, failed.run_id);
    } catch (e) {
      if (e instanceof Fail) return { status: 409, body: { block_reason: "process_running" } };
      throw e;
    }
    const stopped = { providers_stopped: earlier, still_alive: 0 };
    await this.store.write(
      "retry_admitted",
      task.task_id,
      [
        [failed.run_id, "stopped_conversation_verified", stopped],
        [
          runId,
          "retry.admitted",
          {
            message_id: messageId,
            run_id: runId,
            previous_run: failed.run_id,
            resends: resend !== null,
            resends_message: resend?.message_id ?? null,
            delivers: this.store.queue(task.task_id).map((m) => m.message_id),
          },
        ],
      ],
      () => {
        // The Retry's own message (ord 0: before any queued follow-up), or,
        // with nothing to re-send, a consumed record of its answer.
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

  /** What a Retry re-sends (runnerd's rule): the latest primary turn's
   * message when its last turn did not complete; nothing when it did and a
   * message no turn took is queued (the failure came before that message's
   * turn: the Retry run answers the queue, and re-sending the answered one
   * would do its work twice); else the latest message, or the first. */
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
