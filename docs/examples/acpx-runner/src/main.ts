// acpx-runner: the runner contract (docs/runner-contract.md) over acpx, so
// that turncut waves acpx itself: every turn goes through acpx's shared
// runtime (`acpx/runtime`, createSharedAcpRuntime) to the queue owner it
// starts, which drives the ACP agent of the profile. This process keeps only
// what the contract asks of a runner and acpx does not keep (the control
// API's ids, the run log); sessions, the queue, reconnects and turn outcomes
// are acpx's.
//
//   acpx-runner --state-dir DIR --listen 127.0.0.1:PORT --profiles FILE
//               [--provider-idle-timeout-ms N] [--provider-term-grace-ms N]
//
// It prints `listening on http://ADDR` when ready and keeps its bearer token in
// DIR/token. Exit codes: 2 bad input (arguments, profiles, cut-point
// environment), 3 the store cannot be opened. Profiles of drivers other than
// acp are refused at task admission (409 unknown_profile).

import { closeSync, existsSync, fsyncSync, openSync, readFileSync, renameSync, writeSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { parse as parseToml } from "smol-toml";
import * as cut from "../../cutpoint-clients/node/cutpoint.mjs";
import { Api } from "./api.ts";
import { Engine, type Profile } from "./engine.ts";
import { Store, syncDir } from "./store.ts";

function fail(code: number, message: string): never {
  process.stderr.write(`acpx-runner: ${message}\n`);
  process.exit(code);
}

function args(argv: string[]): Map<string, string> {
  const known = ["--state-dir", "--listen", "--profiles", "--provider-idle-timeout-ms", "--provider-term-grace-ms"];
  const out = new Map<string, string>();
  for (let i = 0; i < argv.length; i += 2) {
    if (!known.includes(argv[i]) || argv[i + 1] === undefined) fail(2, `unknown or incomplete argument ${argv[i]}; expected ${known.join(", ")}`);
    out.set(argv[i], argv[i + 1]);
  }
  if (!out.has("--state-dir")) fail(2, "--state-dir is required");
  return out;
}

/** The acp profiles of the profiles file; other drivers are left out. */
function profiles(path: string | undefined): Map<string, Profile> {
  const out = new Map<string, Profile>();
  if (!path) return out;
  let doc: any;
  try {
    doc = parseToml(readFileSync(path, "utf8"));
  } catch (e) {
    fail(2, `cannot read the profiles file ${path}: ${(e as Error).message}`);
  }
  for (const [name, p] of Object.entries<any>(doc.profile ?? {})) {
    if (!Array.isArray(p.command) || p.command.length === 0) fail(2, `profile ${name} has no command`);
    if (p.driver !== "acp") {
      process.stderr.write(`acpx-runner: profile ${name}: driver ${p.driver} is not supported; its tasks are refused\n`);
      continue;
    }
    out.set(name, { driver: p.driver, command: p.command, approval: p.approval ?? "accept", credential_env: p.credential_env ?? "TURNCUT_PROVIDER_API_KEY" });
  }
  return out;
}

function token(stateDir: string): string {
  const path = join(stateDir, "token");
  if (existsSync(path)) return readFileSync(path, "utf8").trim();
  const t = randomBytes(24).toString("hex");
  // Synced before and after the rename: a power cut keeps the token or none.
  const fd = openSync(`${path}.tmp`, "w", 0o600);
  writeSync(fd, t);
  fsyncSync(fd);
  closeSync(fd);
  renameSync(`${path}.tmp`, path);
  syncDir(stateDir);
  return t;
}

function main(): void {
  const a = args(process.argv.slice(2));
  // The fake agent needs no key, and acpx hands its whole environment to
  // the queue owner it starts and to every terminal command it runs for the
  // agent: the credential leaves this process's environment before acpx
  // starts anything.
  delete process.env.TURNCUT_PROVIDER_API_KEY;
  try {
    cut.init();
  } catch (e) {
    fail(2, (e as Error).message);
  }
  const listen = a.get("--listen") ?? "127.0.0.1:0";
  const [host, port] = [listen.slice(0, listen.lastIndexOf(":")), Number(listen.slice(listen.lastIndexOf(":") + 1))];
  if (host !== "127.0.0.1" && host !== "[::1]") fail(2, `--listen ${listen} is not a loopback address`);
  const stateDir = a.get("--state-dir")!;
  let store: Store;
  try {
    store = new Store(stateDir);
  } catch (e) {
    fail(3, `cannot open the store in ${stateDir}: ${(e as Error).message}`);
  }
  const engine = new Engine(store, {
    stateDir,
    idleMs: Number(a.get("--provider-idle-timeout-ms") ?? 30_000),
    termGraceMs: Number(a.get("--provider-term-grace-ms") ?? 500),
    profiles: profiles(a.get("--profiles")),
  });
  const server = new Api(store, engine, token(stateDir)).server();
  server.listen(port, host.replace(/^\[|\]$/g, ""), () => {
    const addr = server.address() as { port: number };
    process.stdout.write(`listening on http://${host}:${addr.port}\n`);
    engine.recoverAll();
  });
  for (const s of ["SIGTERM", "SIGINT"] as const)
    process.on(s, () => {
      engine.releaseSockets();
      process.exit(0);
    });
}

main();
