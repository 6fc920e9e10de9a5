#!/bin/bash
# What a real ACP agent keeps after a SIGKILL mid-turn, driven through acpx's CLI:
#   tools/acp-kill-probe.sh codex|claude DIR NPM_PREFIX   (NPM_PREFIX: where `npm install --prefix NPM_PREFIX @zed-industries/codex-acp@0.16.0 @zed-industries/claude-agent-acp@0.23.1` put them; DIR not under /tmp)
# The fake model API hangs on the turn's 2nd model request (after the approved tool ran),
# the agent's process group (acpx's queue owner and the agent) is SIGKILLed there, then a
# second prompt reconnects (session/resume or session/load); the fake's journal shows what the
# agent sent its model after the restart, acpx's journal what acpx recorded.
set -u
which=$1; dir=$2; agents=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
T=$repo/target/release/turncut
N=$repo/docs/examples/acpx-runner/node_modules/.bin/node
ACPX=$repo/docs/examples/acpx-runner/node_modules/acpx/dist/cli.js
rm -rf "$dir"; mkdir -p "$dir"/{home/home,ws,model,acpxhome}
exec 3< <(sleep 600)
$T fake-provider model-api --state-dir "$dir/model" --port 0 --hang model.responses.received#2 --hang model.messages.received#2 <&3 > "$dir/model.out" 2> "$dir/model.err" &
model_pid=$!
trap 'kill "$model_pid" 2>/dev/null' EXIT
for i in $(seq 50); do [ -s "$dir/model.out" ] && break; sleep 0.1; done
URL=$(sed 's/model api listening on //' "$dir/model.out")
if [ "$which" = codex ]; then
  cat > "$dir/home/config.toml" <<EOC
model_provider = "fake"
model = "turncut-fake-model"
approval_policy = "on-request"
sandbox_mode = "workspace-write"
[model_providers.fake]
name = "fake"
base_url = "$URL/v1"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
request_max_retries = 0
stream_max_retries = 0
[sandbox_workspace_write]
writable_roots = ["$dir"]
EOC
  AG="env CODEX_HOME=$dir/home HOME=$dir/home/home OPENAI_API_KEY=sk-turncut-probe $agents/node_modules/.bin/codex-acp"
else
  AG="env HOME=$dir/home CLAUDE_CONFIG_DIR=$dir/home/.claude ANTHROPIC_BASE_URL=$URL ANTHROPIC_API_KEY=sk-ant-turncut-probe CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 IS_SANDBOX=1 $N $agents/node_modules/@zed-industries/claude-agent-acp/dist/index.js"
fi
cd "$dir/ws"
A() { HOME=$dir/acpxhome timeout 120 $N $ACPX --approve-all --format json --agent "$AG" "$@"; }
A sessions new > "$dir/new.json" 2>&1
A prompt "[turncut:message m1] Create hello.txt" > "$dir/p1.json" 2>&1 &
# Wait for the hang (the 2nd model request: the tool ran, the agent asks the model again).
for i in $(seq 600); do grep -q '"fault.hang"' "$dir/model/journal.jsonl" 2>/dev/null && break; sleep 0.1; done
lease=$(cat $dir/acpxhome/.acpx/queues/*.lock); owner=$(echo "$lease" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
echo "hung; owner $owner; killing its group"; kill -KILL -- -$owner
sleep 1
A prompt "[turncut:message m2] Say done" > "$dir/p2.json" 2>&1; echo "second prompt rc=$?"
ls $dir/acpxhome/.acpx/sessions/
