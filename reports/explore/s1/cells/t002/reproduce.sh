#!/bin/sh
# t002: restart-chaos.runner-codex.local.cut-turn-start-retry@runner.codex.response.received#3/hang-provider+codex.effect.starting#1/kill-provider+runner.item.persisted#2/kill-runner (fail in the wave)
# Runs this cell again with the turncut that ran the wave (version 0.1.0).
# If that file is gone, point TURNCUT at another turncut of that version,
# e.g. TURNCUT="$(command -v turncut)" sh reproduce.sh
TURNCUT="${TURNCUT:-/work/main/target/debug/turncut}"
exec "$TURNCUT" run restart-chaos.runner-codex.local.cut-turn-start-retry --schedule runner.codex.response.received#3/hang-provider+codex.effect.starting#1/kill-provider+runner.item.persisted#2/kill-runner
