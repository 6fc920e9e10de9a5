// The control API (docs/runner-contract.openapi.json): node:http, loopback
// only, a bearer token. Handlers validate, write through the store and wake
// the task's actor; they never talk to a provider. Every write is idempotent
// by its ids: the harness sends a request again when a restart cut it off.

import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { realpathSync, statSync } from "node:fs";
import { isAbsolute } from "node:path";
import { timingSafeEqual } from "node:crypto";
import { type Engine, newId } from "./engine.ts";
import { StorageError, type Store, type Task } from "./store.ts";

const TEXT_BYTES_MAX = 128 * 1024;
const BODY_BYTES_MAX = 1024 * 1024;
const KEEPALIVE_MS = 15_000;

type Answer = { status: number; body: unknown };

const reasons: Record<number, string> = { 400: "bad_json", 401: "unauthorized", 404: "unknown_task", 413: "body_too_large", 503: "storage_failed" };

function error(status: number, message: string, reason = reasons[status]): Answer {
  return { status, body: { error: message, reason } };
}

function send(res: ServerResponse, a: Answer): void {
  res.writeHead(a.status, { "Content-Type": "application/json" });
  res.end(JSON.stringify(a.body));
}

function readBody(req: IncomingMessage): Promise<Buffer | null> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size <= BODY_BYTES_MAX) chunks.push(c);
    });
    req.on("end", () => resolve(size > BODY_BYTES_MAX ? null : Buffer.concat(chunks)));
    req.on("error", () => resolve(Buffer.alloc(0)));
  });
}

/** The body as an object with exactly `fields`, all strings; else a 400. */
function parse(body: Buffer, fields: string[]): Record<string, string> | Answer {
  let v: unknown;
  try {
    v = JSON.parse(body.toString("utf8"));
  } catch (e) {
    return error(400, `bad JSON body: ${(e as Error).message}`);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return error(400, "the body is not a JSON object");
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o);
  const odd = keys.find((k) => !fields.includes(k)) ?? fields.find((f) => typeof o[f] !== "string");
  if (odd !== undefined) return error(400, `bad JSON body: field ${odd} is unknown, missing or not a string`);
  return o as Record<string, string>;
}

function badId(id: string): boolean {
  return id.length === 0 || id.length > 200 || /\p{Cc}/u.test(id);
}

function badWorkspace(ws: string): string | null {
  if (!isAbsolute(ws) || ws.includes("\0")) return `the workspace ${ws} is not an absolute path`;
  try {
    if (realpathSync(ws) !== ws) return `the workspace ${ws} is not canonical`;
    if (!statSync(ws).isDirectory()) return `the workspace ${ws} is not a directory`;
  } catch (e) {
    return `the workspace ${ws} is not usable: ${(e as Error).message}`;
  }
  return ws === "/" ? "the workspace cannot be /" : null;
}

export class Api {
  private store: Store;
  private engine: Engine;
  private token: string;

  constructor(store: Store, engine: Engine, token: string) {
    this.store = store;
    this.engine = engine;
    this.token = token;
  }

  server() {
    return createServer((req, res) => {
      this.handle(req, res).catch((e) => {
        const a = e instanceof StorageError ? error(503, e.message) : error(503, `internal error: ${e}`, "storage_failed");
        if (!res.headersSent) send(res, a);
        else res.end();
      });
    });
  }

  private authorized(req: IncomingMessage): boolean {
    const given = Buffer.from(req.headers.authorization ?? "");
    const want = Buffer.from(`Bearer ${this.token}`);
    return given.length === want.length && timingSafeEqual(given, want);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!this.authorized(req)) return send(res, error(401, "missing or wrong bearer token"));
    const url = new URL(req.url ?? "/", "http://runner");
    const parts = url.pathname.split("/").slice(1).map(decodeURIComponent);
    const method = req.method ?? "GET";
    const route = (m: string, ok: boolean) => ok && m === method;
    if (parts.length === 2 && parts[1] === "health" && parts[0] === "v1") {
      if (method !== "GET") return send(res, error(405, "this call does not take this method", "method_not_allowed"));
      return send(res, { status: 200, body: { ok: true, owner_epoch: this.store.epoch, pid: process.pid } });
    }
    if (parts[0] !== "v1" || parts[1] !== "tasks" || parts.length > 4 || (parts.length === 4 && !["messages", "retry", "events"].includes(parts[3]))) {
      return send(res, error(404, "no such call", "no_route"));
    }
    if (parts.length === 2) {
      if (method !== "POST") return send(res, error(405, "this call does not take this method", "method_not_allowed"));
      return send(res, await this.createTask(await readBody(req)));
    }
    const task = this.store.task(parts[2]);
    const want = parts.length === 3 || parts[3] === "events" ? "GET" : "POST";
    if (!route(want, true)) return send(res, error(405, "this call does not take this method", "method_not_allowed"));
    if (!task) return send(res, error(404, `no task ${parts[2]}`));
    if (parts.length === 3) return send(res, { status: 200, body: this.view(task) });
    if (parts[3] === "events") return this.events(req, res, task, url.searchParams.get("after"));
    const body = await readBody(req);
    if (body === null) return send(res, error(413, "the request body is too large"));
    if (parts[3] === "messages") return send(res, await this.followUp(task, body));
    const r = parse(body, ["message_id"]);
    if ("status" in r) return send(res, r as Answer);
    if (badId(r.message_id)) return send(res, error(400, "message_id must be 1 to 200 characters", "invalid_id"));
    return send(res, await this.engine.retry(task, r.message_id));
  }

  private async createTask(body: Buffer | null): Promise<Answer> {
    if (body === null) return error(413, "the request body is too large");
    const r = parse(body, ["task_id", "message_id", "prompt", "profile", "workspace"]);
    if ("status" in r) return r as Answer;
    if (badId(r.task_id) || badId(r.message_id)) return error(400, "ids must be 1 to 200 characters", "invalid_id");
    const ws = badWorkspace(r.workspace);
    if (ws) return error(400, ws, "invalid_workspace");
    if (Buffer.byteLength(r.prompt) > TEXT_BYTES_MAX) return error(413, "the prompt is too large", "text_too_large");
    if (!this.engine.opts.profiles.has(r.profile)) {
      return { status: 409, body: { reason: "unknown_profile", error: `profile ${r.profile} is not configured` } };
    }
    const have = this.store.task(r.task_id);
    if (have) {
      const first = this.store.message(r.task_id, r.message_id);
      const same = first?.kind === "initial" && first.text === r.prompt && have.profile === r.profile && have.workspace === r.workspace;
      if (!same) return { status: 409, body: { reason: "id_conflict", error: `task ${r.task_id} exists with other content` } };
      return { status: 201, body: { task_id: r.task_id, run_id: this.store.runs(r.task_id)[0].run_id } };
    }
    const runId = newId("run");
    await this.store.write("task_admitted", r.task_id, [[runId, "task.admitted", { message_id: r.message_id, profile: r.profile, run_id: runId }]], () => {
      this.store.exec(
        "INSERT INTO tasks(task_id, profile, workspace, state, current_run, created_ms) VALUES (?, ?, ?, 'running', ?, ?)",
        r.task_id, r.profile, r.workspace, runId, Date.now(),
      );
      this.store.exec("INSERT INTO messages(task_id, message_id, kind, text, ord) VALUES (?, ?, 'initial', ?, 1)", r.task_id, r.message_id, r.prompt);
      this.store.exec(
        "INSERT INTO runs(run_id, task_id, kind, trigger_message_id, status, owner_epoch, created_ms) VALUES (?, ?, 'initial', ?, 'running', ?, ?)",
        runId, r.task_id, r.message_id, this.store.epoch, Date.now(),
      );
    });
    this.engine.wake(r.task_id);
    return { status: 201, body: { task_id: r.task_id, run_id: runId } };
  }

  private async followUp(task: Task, body: Buffer): Promise<Answer> {
    const r = parse(body, ["message_id", "text"]);
    if ("status" in r) return r as Answer;
    if (badId(r.message_id)) return error(400, "message_id must be 1 to 200 characters", "invalid_id");
    if (Buffer.byteLength(r.text) > TEXT_BYTES_MAX) return error(413, "the follow-up text is too large", "text_too_large");
    const known = this.store.message(task.task_id, r.message_id);
    if (known) {
      if (known.kind !== "follow_up" || known.text !== r.text) return { status: 409, body: { reason: "id_conflict", error: `message ${r.message_id} exists with other content` } };
      return { status: 202, body: { task_id: task.task_id, queued: true, new_run_id: known.answer } };
    }
    if (task.state === "failed" || task.state === "needs_human") {
      await this.store.write("fence_refusal", task.task_id, [[task.current_run, "prior_owner_fence_refused", { message_id: r.message_id, reason: "prior_owner_fence_refused" }]]);
      return { status: 409, body: { reason: "prior_owner_fence_refused", error: "the task failed; a follow-up cannot reopen it, use Retry" } };
    }
    const reopen = task.state === "completed";
    const runId = reopen ? newId("run") : null;
    const conversation = this.store.run(task.current_run)!.conversation_id;
    await this.store.write("follow_up", task.task_id, [[runId ?? task.current_run, "message.queued", { message_id: r.message_id, kind: "follow_up", new_run: reopen }]], () => {
      this.store.exec(
        "INSERT INTO messages(task_id, message_id, kind, text, ord, answer) VALUES (?, ?, 'follow_up', ?, ?, ?)",
        task.task_id, r.message_id, r.text, this.store.nextOrd(task.task_id), runId,
      );
      if (runId) {
        this.store.exec(
          "INSERT INTO runs(run_id, task_id, kind, trigger_message_id, status, conversation_id, owner_epoch, created_ms) VALUES (?, ?, 'follow_up', ?, 'running', ?, ?, ?)",
          runId, task.task_id, r.message_id, conversation, this.store.epoch, Date.now(),
        );
        this.store.exec("UPDATE tasks SET state = 'running', current_run = ? WHERE task_id = ?", runId, task.task_id);
      }
    });
    this.engine.wake(task.task_id);
    return { status: 202, body: { task_id: task.task_id, queued: true, new_run_id: runId } };
  }

  /** The task view of the contract (every field, null when none). */
  view(task: Task): object {
    return {
      task_id: task.task_id,
      profile: task.profile,
      workspace: task.workspace,
      state: task.state,
      cause: task.cause,
      current_run: task.current_run,
      runs: this.store.runs(task.task_id).map((r) => ({
        run_id: r.run_id, task_id: r.task_id, kind: r.kind, trigger_message_id: r.trigger_message_id, status: r.status,
        cause: r.cause, conversation_id: r.conversation_id, owner_epoch: r.owner_epoch, created_ms: r.created_ms,
        turns: this.store.turns(r.run_id).map((t) => ({
          turn_row: t.turn_row, run_id: t.run_id, message_id: t.message_id, kind: t.kind, client_id: t.client_id,
          provider_turn_id: t.provider_turn_id, status: t.status,
        })),
      })),
      queued_messages: this.store.queue(task.task_id).map((m) => m.message_id),
    };
  }

  /** The run log: JSON lines, or SSE (the backlog, then each new event). */
  private events(req: IncomingMessage, res: ServerResponse, task: Task, afterText: string | null): void {
    const after = afterText === null ? 0 : Number(afterText);
    if (!Number.isInteger(after)) return send(res, error(400, "after must be an integer", "bad_query"));
    if (!(req.headers.accept ?? "").includes("text/event-stream")) {
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.end(this.store.events(task.task_id, after).map((e) => JSON.stringify(e) + "\n").join(""));
      return;
    }
    res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
    const put = (e: { seq: number }) => res.write(`id: ${e.seq}\ndata: ${JSON.stringify(e)}\n\n`);
    // Read the backlog and subscribe in one tick: nothing committed in
    // between is missed (the store commits synchronously).
    let last = after;
    for (const e of this.store.events(task.task_id, after)) {
      put(e);
      last = e.seq;
    }
    const unsubscribe = this.store.subscribe((e) => {
      if (e.task_id === task.task_id && e.seq > last) {
        last = e.seq;
        put(e);
      }
    });
    const keepalive = setInterval(() => res.write(": keep-alive\n\n"), KEEPALIVE_MS);
    res.on("close", () => {
      clearInterval(keepalive);
      unsubscribe();
    });
  }
}
