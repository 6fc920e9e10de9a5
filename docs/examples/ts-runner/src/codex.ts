// A Codex app-server client over a provider's stdio: one JSON object a line,
// requests matched to responses by id, notifications and server requests
// (approvals) handed out one at a time by `next`, each wait bounded by the
// idle timeout. It speaks only the part of the protocol the runner needs
// (initialize, thread/start, thread/resume, thread/read, turn/start, approval
// answers) and decides nothing.

import type { ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";

export type Incoming = { id?: number | string; method?: string; params?: any; result?: any; error?: any };

/** One turn of the event loop's I/O: a timer callback runs before the poll
 * phase reads the provider's pipe, so output that arrived while the runner
 * itself was blocked is read before the provider is called silent. */
function ioTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** The provider went away, or said nothing for too long. */
export class ProviderLost extends Error {
  kind: "provider_exited" | "provider_unresponsive";
  constructor(kind: "provider_exited" | "provider_unresponsive", detail: string) {
    super(detail);
    this.kind = kind;
  }
}

/** The provider answered a request with an error. */
export class RpcError extends Error {}

export class Codex {
  private nextId = 0;
  private pending = new Map<number, { resolve: (v: any) => void; reject: (e: Error) => void }>();
  private inbox: Incoming[] = [];
  private waiter: (() => void) | null = null;
  private closed = false;

  private child: ChildProcess;
  private idleMs: number;

  constructor(child: ChildProcess, idleMs: number) {
    this.child = child;
    this.idleMs = idleMs;
    const lines = createInterface({ input: child.stdout! });
    lines.on("line", (line) => this.onLine(line));
    lines.on("close", () => {
      this.closed = true;
      for (const p of this.pending.values()) p.reject(new ProviderLost("provider_exited", "the provider's stdout closed"));
      this.pending.clear();
      this.waiter?.();
    });
    // A provider that dies while we write to it must not kill the runner.
    child.stdin!.on("error", () => {});
  }

  private onLine(line: string): void {
    let msg: Incoming;
    try {
      msg = JSON.parse(line);
    } catch {
      return;
    }
    if (msg.method === undefined && msg.id !== undefined && this.pending.has(Number(msg.id))) {
      const p = this.pending.get(Number(msg.id))!;
      this.pending.delete(Number(msg.id));
      if (msg.error) p.reject(new RpcError(msg.error.message ?? JSON.stringify(msg.error)));
      else p.resolve(msg.result);
      return;
    }
    this.inbox.push(msg);
    this.waiter?.();
  }

  send(msg: object): void {
    if (!this.closed) this.child.stdin!.write(JSON.stringify(msg) + "\n");
  }

  /** A request, answered within `waitMs` (the idle timeout by default). */
  request(method: string, params: object, waitMs: number = this.idleMs): Promise<any> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(async () => {
        // The runner's own stall (a long fsync blocks the event loop) is not
        // the provider's silence: read what already arrived first.
        await ioTurn();
        if (this.pending.delete(id)) reject(new ProviderLost("provider_unresponsive", `no answer to ${method} within ${waitMs} ms`));
      }, waitMs);
      const done = (f: (v: any) => void) => (v: any) => {
        clearTimeout(timer);
        f(v);
      };
      this.pending.set(id, { resolve: done(resolve), reject: done(reject) });
      this.send({ method, id, params });
    });
  }

  /** The next notification or server request, within the idle timeout. */
  async next(): Promise<Incoming> {
    const deadline = Date.now() + this.idleMs;
    while (this.inbox.length === 0) {
      if (this.closed) throw new ProviderLost("provider_exited", "the provider's stdout closed");
      const left = deadline - Date.now();
      if (left <= 0) {
        // As in `request`: what the provider sent while the runner stalled counts.
        await ioTurn();
        if (this.inbox.length > 0) break;
        throw new ProviderLost("provider_unresponsive", `silent for ${this.idleMs} ms during a turn`);
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiter = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.waiter = null;
    }
    return this.inbox.shift()!;
  }

  /** The handshake, within `startMs`: a process that is still starting is not
   * a provider silent while it works, which is what the idle timeout bounds. */
  async initialize(startMs: number): Promise<void> {
    await this.request("initialize", { clientInfo: { name: "ts-runner", title: null, version: "0.1.0" } }, Math.max(startMs, this.idleMs));
    this.send({ method: "initialized" });
  }

  async startThread(cwd: string): Promise<string> {
    const r = await this.request("thread/start", { cwd });
    return r.thread.id;
  }

  async resumeThread(threadId: string, cwd: string): Promise<void> {
    await this.request("thread/resume", { threadId, excludeTurns: true, cwd });
  }

  async startTurn(threadId: string, text: string, clientId: string): Promise<string> {
    const r = await this.request("turn/start", {
      threadId,
      input: [{ type: "text", text, text_elements: [] }],
      clientUserMessageId: clientId,
    });
    return r.turn.id;
  }

  /** The thread's turns with their items (thread/read {includeTurns}). */
  async readTurns(threadId: string): Promise<any[]> {
    const r = await this.request("thread/read", { threadId, includeTurns: true });
    return r.thread.turns ?? [];
  }

  answer(requestId: number | string, decision: string): void {
    this.send({ id: requestId, result: { decision } });
  }
}
