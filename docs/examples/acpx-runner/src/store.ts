// The durable store: one SQLite file (node:sqlite, WAL, synchronous=FULL) with
// the tasks, their messages, runs, turns and providers, and the run log. Every
// change goes through `write`, which passes the cut point `runner.write.<name>`
// first (where the harness can fail it with EIO or ENOSPC), commits the change
// and its run-log events in one transaction, and then passes
// `runner.<name>.persisted`. So a committed change always has its event, and
// the harness can cut the runner right before and right after every write.
// This module decides nothing: the engine and the API do.

import { DatabaseSync } from "node:sqlite";
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import * as cut from "../../cutpoint-clients/node/cutpoint.mjs";

export type Cause = { code: string; recoverable: boolean; message: string };
export type TaskState = "running" | "completed" | "failed" | "needs_human";
export type EventRow = {
  v: 1;
  task_id: string;
  seq: number;
  run_id: string | null;
  ts_ms: number;
  kind: string;
  data: Record<string, unknown>;
};
export type Task = {
  task_id: string;
  profile: string;
  workspace: string;
  state: TaskState;
  cause: Cause | null;
  current_run: string;
};
export type Run = {
  run_id: string;
  task_id: string;
  kind: "initial" | "follow_up" | "retry";
  trigger_message_id: string;
  status: "running" | "completed" | "failed";
  cause: Cause | null;
  conversation_id: string | null;
  owner_epoch: number;
  created_ms: number;
};
export type Turn = {
  turn_row: number;
  run_id: string;
  message_id: string;
  kind: "primary" | "continuation";
  client_id: string;
  provider_turn_id: string | null;
  status: "intent" | "accepted" | "completed" | "interrupted" | "failed";
};
export type Message = { message_id: string; kind: string; text: string; consumed_run: string | null };
/** A provider spawn: its marker from the intent on, its identity once recorded. */
export type Provider = { row: number; task_id: string; marker: string; pid: number | null; pgid: number | null; start_time: number | null; stopped: number };
export type NewEvent = [runId: string | null, kind: string, data: Record<string, unknown>];

/** Creates `dir` (and its missing parents) so that each new name survives a
 * power cut: every directory that got a new entry is synced. */
export function mkdirDurable(dir: string): void {
  const missing: string[] = [];
  for (let d = resolve(dir); !existsSync(d); d = dirname(d)) missing.unshift(d);
  for (const d of missing) {
    mkdirSync(d, { mode: 0o700 });
    syncDir(dirname(d));
  }
}

/** fsyncs a directory (its entries). */
export function syncDir(dir: string): void {
  const fd = openSync(dir, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** A write the harness failed (or a full disk): the step that made it stops. */
export class StorageError extends Error {
  code: string;
  constructor(code: string, write: string) {
    super(`storage failed: ${code} at the write ${write}`);
    this.code = code;
  }
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks(task_id TEXT PRIMARY KEY, profile TEXT NOT NULL, workspace TEXT NOT NULL,
  state TEXT NOT NULL, cause TEXT, current_run TEXT NOT NULL, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS messages(task_id TEXT NOT NULL, message_id TEXT NOT NULL, kind TEXT NOT NULL,
  text TEXT NOT NULL, ord INTEGER NOT NULL, consumed_run TEXT, answer TEXT, PRIMARY KEY(task_id, message_id));
CREATE TABLE IF NOT EXISTS runs(run_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, kind TEXT NOT NULL,
  trigger_message_id TEXT NOT NULL, status TEXT NOT NULL, cause TEXT, conversation_id TEXT,
  owner_epoch INTEGER NOT NULL, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS turns(turn_row INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL,
  task_id TEXT NOT NULL, message_id TEXT NOT NULL, kind TEXT NOT NULL, client_id TEXT NOT NULL,
  provider_turn_id TEXT, status TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS providers(row INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT NOT NULL, marker TEXT NOT NULL,
  pid INTEGER, pgid INTEGER, start_time INTEGER, stopped INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS events(task_id TEXT NOT NULL, seq INTEGER NOT NULL, run_id TEXT, ts_ms INTEGER NOT NULL,
  kind TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY(task_id, seq));
`;

export class Store {
  readonly db: DatabaseSync;
  readonly epoch: number;
  private diskFull = false;
  private listeners = new Set<(ev: EventRow) => void>();

  constructor(stateDir: string) {
    mkdirSync(stateDir, { recursive: true, mode: 0o700 });
    this.db = new DatabaseSync(join(stateDir, "runner.sqlite3"));
    this.db.exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;");
    this.db.exec(SCHEMA);
    const row = this.db.prepare("SELECT value FROM meta WHERE key = 'epoch'").get() as { value: string } | undefined;
    this.epoch = (row ? Number(row.value) : 0) + 1;
    this.db.prepare("INSERT OR REPLACE INTO meta(key, value) VALUES ('epoch', ?)").run(String(this.epoch));
  }

  /** Runs `body` and appends `events` in one durable transaction, between
   * the cut points of the write `name`. */
  async write(name: string, taskId: string, events: NewEvent[], body: () => void = () => {}): Promise<void> {
    if (this.diskFull) throw new StorageError("ENOSPC", name);
    try {
      await cut.hitIo(`runner.write.${name}`);
    } catch (e) {
      const code = (e as { code?: string }).code ?? "EIO";
      // A full disk stays full for the rest of this process (fault disk-full).
      if (code === "ENOSPC") this.diskFull = true;
      throw new StorageError(code, name);
    }
    const committed: EventRow[] = [];
    this.db.exec("BEGIN IMMEDIATE");
    try {
      body();
      const last = this.db.prepare("SELECT coalesce(max(seq), 0) AS s FROM events WHERE task_id = ?").get(taskId) as {
        s: number;
      };
      let seq = last.s;
      for (const [runId, kind, data] of events) {
        seq += 1;
        const ev: EventRow = { v: 1, task_id: taskId, seq, run_id: runId, ts_ms: Date.now(), kind, data };
        this.db
          .prepare("INSERT INTO events(task_id, seq, run_id, ts_ms, kind, data) VALUES (?, ?, ?, ?, ?, ?)")
          .run(taskId, seq, runId, ev.ts_ms, kind, JSON.stringify(data));
        committed.push(ev);
      }
      this.db.exec("COMMIT");
    } catch (e) {
      this.db.exec("ROLLBACK");
      throw e;
    }
    for (const ev of committed) for (const l of this.listeners) l(ev);
    await cut.hit(`runner.${name}.persisted`);
  }

  /** Calls `f` with every event committed from now on. */
  subscribe(f: (ev: EventRow) => void): () => void {
    this.listeners.add(f);
    return () => this.listeners.delete(f);
  }

  events(taskId: string, after: number): EventRow[] {
    const rows = this.db
      .prepare("SELECT seq, run_id, ts_ms, kind, data FROM events WHERE task_id = ? AND seq > ? ORDER BY seq")
      .all(taskId, after) as Array<{ seq: number; run_id: string | null; ts_ms: number; kind: string; data: string }>;
    return rows.map((r) => ({ v: 1, task_id: taskId, seq: r.seq, run_id: r.run_id, ts_ms: r.ts_ms, kind: r.kind, data: JSON.parse(r.data) }));
  }

  task(taskId: string): Task | undefined {
    const r = this.db.prepare("SELECT * FROM tasks WHERE task_id = ?").get(taskId) as Record<string, unknown> | undefined;
    return r && ({ ...r, cause: r.cause ? JSON.parse(r.cause as string) : null } as Task);
  }

  runningTasks(): string[] {
    return (this.db.prepare("SELECT task_id FROM tasks WHERE state = 'running'").all() as Array<{ task_id: string }>).map(
      (r) => r.task_id,
    );
  }

  runs(taskId: string): Run[] {
    return (this.db.prepare("SELECT * FROM runs WHERE task_id = ? ORDER BY created_ms, rowid").all(taskId) as Array<
      Record<string, unknown>
    >).map((r) => ({ ...r, cause: r.cause ? JSON.parse(r.cause as string) : null }) as Run);
  }

  run(runId: string): Run | undefined {
    const r = this.db.prepare("SELECT * FROM runs WHERE run_id = ?").get(runId) as Record<string, unknown> | undefined;
    return r && ({ ...r, cause: r.cause ? JSON.parse(r.cause as string) : null } as Run);
  }

  turns(runId: string): Turn[] {
    return this.db.prepare("SELECT * FROM turns WHERE run_id = ? ORDER BY turn_row").all(runId) as Turn[];
  }

  message(taskId: string, messageId: string): (Message & { answer: string | null }) | undefined {
    return this.db.prepare("SELECT * FROM messages WHERE task_id = ? AND message_id = ?").get(taskId, messageId) as
      | (Message & { answer: string | null })
      | undefined;
  }

  /** Accepted messages no primary turn consumed yet, in order. */
  queue(taskId: string): Message[] {
    return this.db
      .prepare("SELECT * FROM messages WHERE task_id = ? AND consumed_run IS NULL ORDER BY ord, rowid")
      .all(taskId) as Message[];
  }

  nextOrd(taskId: string): number {
    const r = this.db.prepare("SELECT coalesce(max(ord), 0) + 1 AS o FROM messages WHERE task_id = ?").get(taskId) as {
      o: number;
    };
    return r.o;
  }

  /** Every spawn marker the task ever had: acpx keeps a session's agent
   * command (with the marker it was created with) for the session's life. */
  markers(taskId: string): string[] {
    return (this.db.prepare("SELECT DISTINCT marker FROM providers WHERE task_id = ?").all(taskId) as Array<{ marker: string }>).map((r) => r.marker);
  }

  liveProviders(taskId: string): Provider[] {
    return this.db.prepare("SELECT * FROM providers WHERE task_id = ? AND stopped = 0 ORDER BY row").all(taskId) as Provider[];
  }

  exec(sql: string, ...args: Array<string | number | null>): void {
    this.db.prepare(sql).run(...args);
  }

  lastInsertRow(): number {
    return Number((this.db.prepare("SELECT last_insert_rowid() AS r").get() as { r: number }).r);
  }
}
