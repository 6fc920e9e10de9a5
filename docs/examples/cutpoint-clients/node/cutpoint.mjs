// cutpoint.mjs: turncut's cut points for a runner written for Node (TypeScript
// or JavaScript), with the standard library only. The wire is docs/cutpoints.md;
// this is the Node twin of the Rust crate `cutpoint` (harness/cutpoint).
//
// `await hit("runner.turn_intent.persisted")` marks a boundary; `await
// hitIo("runner.write.turn_intent")` marks one before an operation that can fail
// (it rejects with an Error whose `code` is "EIO" or "ENOSPC" when the harness
// says so, or "CORRUPT" when it says the data read there is corrupt). The environment is read once. Disarmed, a hit is one boolean test.
// Traced, every hit appends one JSON line to the trace file in one write(2) on an
// O_APPEND descriptor, so lines of concurrent processes never tear. At the armed
// occurrence the hit connects to the harness, sends its line and waits for the
// reply: the awaiting code is held at that boundary (the rest of the event loop
// goes on, as a Rust runner's other threads do) until the harness replies or
// kills the process. A harness that cannot be reached is logged to stderr and
// the hit continues: the harness notices a missing hold by its own deadline.
// Plain JavaScript with type declarations beside it (cutpoint.d.mts), so it runs
// unchanged on any Node >= 18 without a build step and types for TypeScript.

import { openSync, writeSync } from "node:fs";
import { createConnection } from "node:net";

export const ENV_SOCKET = "TURNCUT_CUT_SOCKET";
export const ENV_ARM = "TURNCUT_CUT_ARM";
export const ENV_TRACE = "TURNCUT_CUT_TRACE";
export const ENV_ROLE = "TURNCUT_ROLE";
/** The occurrence of an arm written `#*`: every hit of its point. */
export const EVERY = 0;

/** A malformed TURNCUT_* environment. */
export class ConfigError extends Error {}

/** Parses a TURNCUT_CUT_ARM value (`a.b#2,runner.write.*#*`). */
export function parseArm(spec) {
  return spec.split(",").map((raw, i) => {
    const entry = raw.trim();
    if (entry === "") throw new ConfigError(`empty entry ${i + 1} in TURNCUT_CUT_ARM "${spec}"`);
    const hash = entry.indexOf("#");
    const point = hash < 0 ? entry : entry.slice(0, hash);
    const occurrence = hash < 0 ? null : entry.slice(hash + 1);
    if (point === "") throw new ConfigError(`empty point name in TURNCUT_CUT_ARM entry "${entry}"`);
    if (/\s/.test(point)) {
      throw new ConfigError(`whitespace inside the point name of TURNCUT_CUT_ARM entry "${entry}"`);
    }
    let n = 1;
    if (occurrence === "*") n = EVERY;
    else if (occurrence !== null) {
      // Only plain digits: a typo must not silently turn a crash test into a
      // run that never cuts.
      n = /^[0-9]+$/.test(occurrence) ? Number(occurrence) : NaN;
      if (!Number.isSafeInteger(n) || n <= 0) {
        throw new ConfigError(
          `bad occurrence "${occurrence}" in TURNCUT_CUT_ARM entry "${entry}": expected a positive integer`,
        );
      }
    }
    return { point, n };
  });
}

/** Whether arm `{point, n}` holds the `n`-th hit of `point`. */
export function armMatches(arm, point, n) {
  const pointOk =
    arm.point.endsWith(".*") ? point.startsWith(arm.point.slice(0, -1)) : arm.point === point;
  return pointOk && (arm.n === EVERY || arm.n === n);
}

let config; // undefined: not read yet; null: disarmed; else the active state.

function env(name) {
  const v = process.env[name];
  return v === undefined || v.trim() === "" ? null : v;
}

/** Reads the environment now (once); throws ConfigError when it is malformed. */
export function init() {
  if (config !== undefined) {
    if (config instanceof ConfigError) throw config;
    return;
  }
  try {
    const armSpec = env(ENV_ARM);
    const arms = armSpec === null ? null : parseArm(armSpec);
    const socket = env(ENV_SOCKET);
    if (arms !== null && socket === null) {
      throw new ConfigError("missing TURNCUT_CUT_SOCKET while TURNCUT_CUT_ARM is set");
    }
    const tracePath = env(ENV_TRACE);
    let traceFd = null;
    if (tracePath !== null) {
      try {
        traceFd = openSync(tracePath, "a");
      } catch (e) {
        throw new ConfigError(`cannot open TURNCUT_CUT_TRACE file ${tracePath}: ${e.message}`);
      }
    }
    config =
      arms === null && traceFd === null
        ? null
        : { role: env(ENV_ROLE) ?? "unknown", arms, socket, traceFd, tracePath, counts: new Map() };
  } catch (e) {
    config = e;
    throw e;
  }
}

/** Whether hits do anything in this process (tracing or arming is on). */
export function active() {
  init();
  return config !== null;
}

/** Marks the boundary `point`; a `fail …` or `corrupt` reply is logged and ignored. */
export async function hit(point) {
  await dispatch(point, false);
}

/** The fault each reply injects: the code of the Error `hitIo` rejects with,
 * and its errno (none for a corrupt read: the kernel returned the bytes, only
 * the reader finds them wrong). */
const FAULTS = new Map([
  ["fail EIO", { code: "EIO", errno: 5 }],
  ["fail ENOSPC", { code: "ENOSPC", errno: 28 }],
  ["corrupt", { code: "CORRUPT", errno: undefined }],
]);

/** Marks the boundary before an operation that can fail: rejects with an
 * Error whose `code` is "EIO" or "ENOSPC" (with its `errno`) when the harness
 * says so, or "CORRUPT" when what the operation reads is to be corrupt. */
export async function hitIo(point) {
  const fault = await dispatch(point, true);
  if (fault !== null) {
    const err = new Error(`${fault.code}: injected by the harness at ${point}`);
    err.code = fault.code;
    if (fault.errno !== undefined) err.errno = fault.errno;
    throw err;
  }
}

function dispatch(point, canFail) {
  init();
  if (config === null) return Promise.resolve(null);
  const n = (config.counts.get(point) ?? 0) + 1;
  config.counts.set(point, n);
  const armed = config.arms !== null && config.arms.some((a) => armMatches(a, point, n));
  if (config.traceFd === null && !armed) return Promise.resolve(null);
  // The pid is taken per hit so that a forked child reports itself.
  const line = JSON.stringify({ role: config.role, pid: process.pid, point, n }) + "\n";
  if (config.traceFd !== null) {
    const bytes = Buffer.from(line);
    try {
      const written = writeSync(config.traceFd, bytes);
      if (written !== bytes.length) {
        process.stderr.write(`cutpoint: short write to trace ${config.tracePath}\n`);
      }
    } catch (e) {
      process.stderr.write(`cutpoint: cannot append to trace ${config.tracePath}: ${e.message}\n`);
    }
  }
  return armed ? hold(line, point, n, canFail) : Promise.resolve(null);
}

/** Sends the hit and resolves with the injected fault (an entry of FAULTS) or null. */
function hold(line, point, n, canFail) {
  return new Promise((resolve) => {
    let reply = "";
    let done = false;
    const finish = (text, error) => {
      if (done) return;
      done = true;
      sock.destroy();
      if (error) {
        process.stderr.write(
          `cutpoint: cannot reach harness at ${config.socket} for ${point}#${n}: ${error.message}; continuing\n`,
        );
        return resolve(null);
      }
      const r = text.replace(/\r?\n$/, "");
      if (r === "continue") return resolve(null);
      const fault = FAULTS.get(r) ?? null;
      if (fault !== null && canFail) return resolve(fault);
      if (fault !== null) {
        const name = fault.code === "CORRUPT" ? "corrupt" : fault.code;
        process.stderr.write(`cutpoint: ${point}#${n} cannot fail; ignoring ${name} and continuing\n`);
      } else if (r === "") {
        process.stderr.write(
          `cutpoint: harness closed the connection for ${point}#${n} without replying; continuing\n`,
        );
      } else {
        process.stderr.write(`cutpoint: unexpected harness reply ${JSON.stringify(r)} for ${point}#${n}; continuing\n`);
      }
      resolve(null);
    };
    // The line is queued before the connection completes, so it reaches the
    // harness together with the connection, not a turn of the event loop later.
    const sock = createConnection(config.socket);
    sock.write(line);
    sock.setEncoding("utf8");
    sock.on("data", (chunk) => {
      reply += chunk;
      const end = reply.indexOf("\n");
      if (end >= 0) finish(reply.slice(0, end + 1), null);
    });
    sock.on("end", () => finish(reply, null));
    sock.on("error", (e) => finish("", e));
  });
}
