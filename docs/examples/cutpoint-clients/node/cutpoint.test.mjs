// The Node client's own test script, run by harness/tests/cutpoint_clients.rs
// against the real harness listener (the Rust `cutpoint::Listener`), which sets
// the TURNCUT_* environment, answers each armed hit as the test plans and then
// compares this script's output and the trace file with what it expects.
// Each step prints `<point> <outcome>`: `continued`, `EIO`, `ENOSPC` or
// `CORRUPT`.

import * as cut from "./cutpoint.mjs";

try {
  cut.init();
} catch (e) {
  process.stderr.write(`config error: ${e.message}\n`);
  process.exit(2);
}

async function step(point, canFail) {
  try {
    await (canFail ? cut.hitIo(point) : cut.hit(point));
    console.log(`${point} continued`);
  } catch (e) {
    console.log(`${point} ${e.code}`);
  }
}

for (let i = 0; i < 3; i++) await step("a.b", false);
await step("w.x", true);
await step("w.y", true);
await step("r.c", true);
await step("w.z", false);
await step("t.q", false);
// Parsing, which the wire depends on, checked here rather than by the harness.
const arms = cut.parseArm(" a#2 , runner.write.*#* ,b");
console.log(
  `parse ${arms.map((a) => `${a.point}#${a.n}`).join(",")} ${cut.armMatches(arms[1], "runner.write.turn_intent", 7)} ${cut.armMatches(arms[1], "runner.writex", 1)}`,
);
