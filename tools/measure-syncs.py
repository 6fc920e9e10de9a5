#!/usr/bin/env python3
"""What a real provider syncs while a turn runs (docs/real-providers.md).

Runs the real `codex app-server` or `opencode serve` offline against
`turncut fake-provider model-api` (as harness/src/real/*.rs run them), under
`strace -f -ttt -y`, plays one turn with one approved command, and prints the
timeline of the syscalls that decide durability (fsync, fdatasync,
sync_file_range, msync, sync, syncfs, rename, renameat2, and the openat calls
that create files) beside the protocol messages, then a summary per path.

    tools/measure-syncs.py codex    TURNCUT CODEX_BIN
    tools/measure-syncs.py opencode TURNCUT OPENCODE_BIN

TURNCUT is a built `turncut`; the binaries are what `turncut providers
--install` installs (target/npm/node_modules/.bin/{codex,opencode}). Needs
strace. Uses only the Python standard library; nothing leaves the machine.
MEASURE_SYNCS_KEEP=FILE keeps the raw strace output; MEASURE_SYNCS_STOP=sigterm
stops codex with SIGTERM (as runnerd stops a provider) instead of closing its
stdin.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

SCRIPT = """
[[turn]]
say = ["Looking at the workspace."]
tools = [{ key = "write-hello", kind = "command", approval = true }]
final = "Created hello.txt."
"""
TRACE = "execve,open,openat,openat2,creat,fsync,fdatasync,sync_file_range,msync,sync,syncfs,rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat"
WAIT_S = 60
EVENTS = []


def mark(what):
    EVENTS.append((time.time(), what))


def model_api(turncut, d):
    os.makedirs(f"{d}/model", exist_ok=True)
    with open(f"{d}/script.toml", "w") as f:
        f.write(SCRIPT)
    p = subprocess.Popen(
        [turncut, "fake-provider", "model-api", "--port", "0", "--script", f"{d}/script.toml",
         "--state-dir", f"{d}/model", "--journal", f"{d}/model-journal.jsonl", "--ledger", f"{d}/ledger.jsonl"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    return p, line.removeprefix("model api listening on ")


def strace(out, argv):
    return ["strace", "-f", "-ttt", "-y", "-s", "256", "-e", f"trace={TRACE}", "-o", out] + argv


def codex(turncut, bin_, d):
    api, url = model_api(turncut, d)
    home, ws = f"{d}/codex-home", f"{d}/ws"
    os.makedirs(f"{home}/home")
    os.makedirs(ws)
    provider = (f'model_providers.fake={{name="fake",base_url="{url}/v1",wire_api="responses",'
                'env_key="OPENAI_API_KEY",request_max_retries=0,stream_max_retries=0}')
    argv = ["env", f"CODEX_HOME={home}", f"HOME={home}/home", "OPENAI_API_KEY=sk-measure", bin_, "app-server"]
    for c in ['model_provider="fake"', provider, 'model="turncut-fake-model"',
              'approval_policy="on-request"', 'sandbox_mode="read-only"',
              'shell_environment_policy.inherit="core"']:
        argv += ["-c", c]
    p = subprocess.Popen(strace(f"{d}/trace", argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ws)
    ids = iter(range(1, 1000))

    def send(m):
        mark(f"-> {m.get('method', 'response')}")
        p.stdin.write(json.dumps(m) + "\n")
        p.stdin.flush()

    def request(method, params):
        i = next(ids)
        send({"id": i, "method": method, "params": params})
        while True:
            m = json.loads(p.stdout.readline())
            if m.get("id") == i and "method" not in m:
                mark(f"<- {method} response")
                return m.get("result")
            note(m)

    def note(m):
        if "method" in m and not m["method"].endswith("delta"):
            mark(f"<- {m['method']}")

    request("initialize", {"clientInfo": {"name": "measure", "title": None, "version": "0"}})
    send({"method": "initialized"})
    thread = request("thread/start", {"cwd": ws})["thread"]["id"]
    request("turn/start", {"threadId": thread, "clientUserMessageId": "m-1",
                           "input": [{"type": "text", "text": "Create hello.txt", "text_elements": []}]})
    deadline = time.time() + WAIT_S
    while time.time() < deadline:
        m = json.loads(p.stdout.readline())
        note(m)
        if m.get("method") == "item/commandExecution/requestApproval":
            send({"id": m["id"], "result": {"decision": "accept"}})
        if m.get("method") == "turn/completed":
            break
    time.sleep(1)  # what it writes right after the turn, before it is stopped
    if os.environ.get("MEASURE_SYNCS_STOP") == "sigterm":
        # As runnerd stops a provider: SIGTERM to the product (strace's child).
        mark("(SIGTERM)")
        server = int(open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()[0])
        os.kill(server, 15)
    else:
        mark("(stdin closed)")
        p.stdin.close()
    p.wait(timeout=WAIT_S)
    api.kill()
    return home, ws


def http(url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"},
                                 method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=WAIT_S) as r:
        text = r.read().decode()
        return r.status, (json.loads(text) if text else None)


def opencode(turncut, bin_, d):
    api, url = model_api(turncut, d)
    home, ws = f"{d}/opencode-home", f"{d}/ws"
    os.makedirs(home)
    os.makedirs(ws)
    with open(f"{d}/key", "w") as f:
        f.write("sk-measure")
    config = {
        "autoupdate": False, "share": "disabled", "model": "openai/turncut-fake-model",
        "small_model": "openai/turncut-fake-model", "agent": {"title": {"disable": True}},
        "provider": {"openai": {"options": {"baseURL": f"{url}/v1", "apiKey": f"{{file:{d}/key}}"},
                                "models": {"turncut-fake-model": {"name": "fake", "tool_call": True}}}},
        "permission": {"bash": "ask"},
    }
    with open(f"{home}/opencode.json", "w") as f:
        json.dump(config, f)
    env = [f"HOME={home}", f"XDG_CONFIG_HOME={home}/.config", f"XDG_DATA_HOME={home}/.local/share",
           f"XDG_CACHE_HOME={home}/.cache", f"XDG_STATE_HOME={home}/.local/state",
           f"OPENCODE_CONFIG={home}/opencode.json", "OPENCODE_DISABLE_MODELS_FETCH=1",
           "OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1",
           "OPENCODE_DISABLE_PROJECT_CONFIG=1", "OPENCODE_DISABLE_CLAUDE_CODE=1",
           "OPENCODE_DISABLE_EXTERNAL_SKILLS=1", "npm_config_offline=true"]
    argv = ["env"] + env + [bin_, "serve", "--hostname", "127.0.0.1", "--port", "0"]
    # A session of its own: SIGTERM goes to the server, strace then ends with it.
    p = subprocess.Popen(strace(f"{d}/trace", argv), stdout=subprocess.PIPE, text=True, cwd=ws,
                         start_new_session=True)
    base = None
    while base is None:
        line = p.stdout.readline()
        m = re.search(r"listening on (http://\S+)", line)
        base = m and m.group(1)
    events = []
    done = threading.Event()

    def listen():
        with urllib.request.urlopen(f"{base}/event", timeout=WAIT_S) as r:
            for raw in r:
                line = raw.decode().strip()
                if line.startswith("data:"):
                    e = json.loads(line[5:])
                    events.append(e)
                    if e["type"] not in ("message.part.updated", "message.part.delta", "server.heartbeat"):
                        mark(f"<- event {e['type']}")
                    if e["type"] == "permission.asked":
                        pid = e["properties"]["id"]
                        mark("-> permission reply")
                        http(f"{base}/permission/{pid}/reply", {"reply": "once"})
                    if e["type"] == "session.idle" or (e["type"] == "session.status" and e["properties"].get("status", {}).get("type") == "idle" and len(events) > 5):
                        done.set()
                        return

    threading.Thread(target=listen, daemon=True).start()
    time.sleep(0.5)
    mark("-> POST /session")
    _, session = http(f"{base}/session", {})
    mark("<- POST /session response")
    mark("-> POST prompt_async")
    http(f"{base}/session/{session['id']}/prompt_async",
         {"messageID": "msg_0000000000000001measure", "parts": [{"type": "text", "text": "Create hello.txt"}]})
    mark("<- prompt_async 204")
    done.wait(WAIT_S)
    time.sleep(1)
    mark("(SIGTERM)")
    server = int(open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()[0])
    os.kill(server, 15)
    p.wait(timeout=WAIT_S)
    api.kill()
    return home, ws


SYSCALL = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(\w+)\((.*)$")


def interesting(name, args):
    if name == "openat":
        return "O_CREAT" in args and "/proc/" not in args and "/dev/" not in args
    return name not in ("execve",) or True


def report(d, roots):
    lines = []
    for raw in open(f"{d}/trace"):
        m = SYSCALL.match(raw)
        if not m:
            continue
        pid, ts, name, args = m.groups()
        if name == "openat" and not interesting(name, args):
            continue
        if name == "execve":
            args = args.split(",")[0]
        for label, root in roots.items():
            args = args.replace(root, label)
        lines.append((float(ts), f"   [{pid}] {name}({args[:200]}"))
    merged = sorted(lines + [(t, f"** {w}") for t, w in EVENTS])
    start = merged[0][0]
    for t, text in merged:
        print(f"{t - start:8.3f} {text}")
    print("\nsummary (syscall, path: count):")
    counts = {}
    for _, text in lines:
        m = re.search(r"\] (\w+)\(\d+<([^>]*)>", text)
        if m and m.group(1) in ("fsync", "fdatasync", "sync_file_range", "msync"):
            key = f"{m.group(1)} {m.group(2)}"
            counts[key] = counts.get(key, 0) + 1
        m = re.search(r"\] (rename\w*)\(.*?\"([^\"]+)\".*?\"([^\"]+)\"", text)
        if m:
            key = f"{m.group(1)} {m.group(2)} -> {m.group(3)}"
            counts[key] = counts.get(key, 0) + 1
    for k in sorted(counts):
        print(f"  {counts[k]:4d}  {k}")


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("codex", "opencode"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    product, turncut, bin_ = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="measure-syncs-") as d:
        home, ws = (codex if product == "codex" else opencode)(turncut, bin_, d)
        report(d, {"$HOME": home, "$WS": ws, "$TMP": d})
        print("\nfiles left in the product's home:")
        for root, _, files in sorted(os.walk(home)):
            for f in sorted(files):
                path = os.path.join(root, f)
                print(f"  {os.path.getsize(path):9d}  {path.replace(home, '$HOME')}")
        if os.environ.get("MEASURE_SYNCS_KEEP"):
            # The raw strace output, for a closer look.
            subprocess.run(["cp", f"{d}/trace", os.environ["MEASURE_SYNCS_KEEP"]], check=True)


if __name__ == "__main__":
    main()
