// acpx's queue-owner sockets, which acpx leaves behind. acpx 0.19.1 puts the
// socket of every queue owner in /tmp/acpx-<the first 10 hex digits of
// sha256($HOME)> (`queueSocketBaseDir` in its ipc module: outside HOME, for
// the 108-byte limit of a socket's path) and unlinks a socket only when its
// owner exits on its own. Every state directory of this runner is a HOME of
// its own, so each one left a directory in /tmp behind once its owners were
// killed (about 800 after a few waves). This module names that directory
// (`<stateDir>/acpx-socket-dir` names it too, for a person), marks it as
// this runner's (`acpx-runner.home` in it names the HOME), removes it once
// no owner of the runner can be alive or starting, and removes at start
// every marked directory whose HOME is gone: a runner SIGKILLed with its
// owners (every cell's last one) cannot remove its own, and its state
// directory, deleted since, says nobody will come back for it.

import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** Where acpx 0.19.1 makes its socket directories (hard-coded, not TMPDIR). */
export const SOCKET_ROOT = "/tmp";

/** The file in a socket directory that names the HOME it belongs to. */
const MARK = "acpx-runner.home";

/** acpx's socket directory for `home` (its `queueSocketBaseDir`). */
export function socketDir(home: string, root = SOCKET_ROOT): string {
  return join(root, `acpx-${createHash("sha256").update(home).digest("hex").slice(0, 10)}`);
}

/** The socket directory of this runner's HOME. */
export class Sockets {
  readonly dir: string;
  readonly home: string;

  constructor(home: string, stateDir: string, root = SOCKET_ROOT) {
    this.home = home;
    this.dir = socketDir(home, root);
    // Not synced: a lost copy only names what the directory's mark names.
    writeFileSync(join(stateDir, "acpx-socket-dir"), `${this.dir}\n`);
  }

  /** Marks the directory as this runner's before acpx may start an owner
   * in it (acpx makes it again, unmarked, after a release). */
  claim(): void {
    if (existsSync(join(this.dir, MARK))) return;
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    writeFileSync(join(this.dir, MARK), this.home);
  }

  /** Call only when no owner of this runner can be starting (no task
   * running): unlinks the socket of every owner `alive` (by acpx's queue
   * key, the socket's name) calls dead, then removes the directory if no
   * live owner's socket is left in it. */
  release(alive: (key: string) => boolean): void {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch {
      return; // Never made, or removed already.
    }
    let left = 0;
    for (const name of names.filter((n) => n.endsWith(".sock"))) {
      if (alive(name.slice(0, -".sock".length))) {
        left += 1;
        continue;
      }
      try {
        unlinkSync(join(this.dir, name));
      } catch {
        // Gone already.
      }
    }
    if (left === 0) rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Removes every socket directory under `root` that an acpx-runner marked
 * and whose HOME no longer exists; returns the directories removed. An
 * unmarked directory (another user's acpx, or one acpx made again after a
 * release) is never touched. */
export function sweepAbandoned(root = SOCKET_ROOT): string[] {
  const removed: string[] = [];
  let names: string[];
  try {
    names = readdirSync(root);
  } catch {
    return removed;
  }
  for (const name of names.filter((n) => /^acpx-[0-9a-f]{10}$/.test(n))) {
    const dir = join(root, name);
    let home: string;
    try {
      home = readFileSync(join(dir, MARK), "utf8");
    } catch {
      continue;
    }
    if (home === "" || existsSync(home)) continue;
    rmSync(dir, { recursive: true, force: true });
    removed.push(dir);
  }
  return removed;
}
