// Provider processes beyond their process group. A provider runs in a group of
// its own, but what it starts may live in other sessions (Codex runs each
// command in a session of its own; the fake's `--child sleep` does the same),
// where a group kill never reaches. Every provider carries a spawn marker in
// its environment, which everything it starts inherits: a stop kills the group,
// then every process that still carries the marker, and proves none is left.
// The marker is durable before the spawn, so a runner that crashed can still
// find what its providers left behind.

import { readdirSync, readFileSync } from "node:fs";

export const MARKER_ENV = "ACPX_RUNNER_SPAWN_MARKER";

/** Start time of a process in clock ticks since boot (/proc/PID/stat field 22). */
export function startTime(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]);
  } catch {
    return null;
  }
}

/** Whether `pid` is still the process that started at `start`. */
export function aliveSame(pid: number, start: number | null): boolean {
  const now = startTime(pid);
  return now !== null && (start === null || now === start);
}

/** Every live process whose environment carries `marker`. */
export function marked(marker: string): number[] {
  const needle = Buffer.from(`${MARKER_ENV}=${marker}\0`);
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^[0-9]+$/.test(name) || Number(name) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${name}/environ`).includes(needle)) out.push(Number(name));
    } catch {
      // Gone, or not ours to read: a process we cannot read is not our provider's.
    }
  }
  return out;
}

function kill(target: number, signal: NodeJS.Signals): void {
  try {
    process.kill(target, signal);
  } catch {
    // Already gone.
  }
}

/** SIGKILLs the group `pgid` (if any) and every process with `marker`, until
 * none is left or `deadlineMs` passes; returns how many it killed and whether
 * any survived. */
export async function sweep(pgid: number | null, marker: string, deadlineMs: number): Promise<{ killed: number; survivors: number[] }> {
  if (pgid !== null) kill(-pgid, "SIGKILL");
  let killed = 0;
  const until = Date.now() + deadlineMs;
  for (;;) {
    const left = marked(marker).filter((pid) => startTime(pid) !== null && !zombie(pid));
    if (left.length === 0) return { killed, survivors: [] };
    if (Date.now() > until) return { killed, survivors: left };
    for (const pid of left) kill(pid, "SIGKILL");
    killed += left.length;
    // A SIGKILLed process leaves /proc when its parent reaps it.
    await new Promise((r) => setTimeout(r, 20));
  }
}

function zombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return true;
  }
}
