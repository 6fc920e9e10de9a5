// sockets.ts against a socket root of its own (node --test src/).

import { after, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sockets, socketDir, sweepAbandoned } from "./sockets.ts";

const bases: string[] = [];
after(() => bases.forEach((b) => rmSync(b, { recursive: true, force: true })));

/** A socket root and a state directory, removed after the tests (the
 * prefix is not acpx's, so a count of /tmp/acpx-* never sees them). */
function scratch(): { root: string; state: string } {
  const base = mkdtempSync(join(tmpdir(), "sockets-test-"));
  bases.push(base);
  const root = join(base, "root");
  const state = join(base, "state");
  mkdirSync(root);
  mkdirSync(state);
  return { root, state };
}

test("the directory is acpx 0.19.1's for the HOME, and the state directory names it", () => {
  const { root, state } = scratch();
  const s = new Sockets("/x/acpx-home", state, root);
  // sha256("/x/acpx-home"), its first 10 hex digits.
  assert.match(s.dir, /\/acpx-[0-9a-f]{10}$/);
  assert.equal(s.dir, socketDir("/x/acpx-home", root));
  assert.equal(readFileSync(join(state, "acpx-socket-dir"), "utf8"), `${s.dir}\n`);
});

test("a release removes dead owners' sockets, and the directory once none is alive", () => {
  const { root, state } = scratch();
  const s = new Sockets(join(state, "acpx-home"), state, root);
  s.claim();
  writeFileSync(join(s.dir, "live.sock"), "");
  writeFileSync(join(s.dir, "dead.sock"), "");
  s.release((key) => key === "live");
  assert.ok(existsSync(join(s.dir, "live.sock")), "a live owner keeps its socket");
  assert.ok(!existsSync(join(s.dir, "dead.sock")));
  s.release(() => false);
  assert.ok(!existsSync(s.dir), "no owner left: the directory goes");
  s.release(() => false); // Twice is fine.
});

test("the sweep removes marked directories whose HOME is gone, and nothing else", () => {
  const { root, state } = scratch();
  const home = join(state, "acpx-home");
  mkdirSync(home);
  const kept = new Sockets(home, state, root);
  kept.claim();
  const gone = new Sockets(join(state, "deleted-home"), state, root);
  gone.claim();
  writeFileSync(join(gone.dir, "dead.sock"), "");
  const unmarked = socketDir("/someone/else", root);
  mkdirSync(unmarked);
  const other = join(root, "acpx-probe");
  mkdirSync(other);
  writeFileSync(join(other, "acpx-runner.home"), "/nowhere");
  assert.deepEqual(sweepAbandoned(root), [gone.dir]);
  assert.ok(existsSync(kept.dir) && existsSync(unmarked) && existsSync(other));
});
