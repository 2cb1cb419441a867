#!/usr/bin/env bash
# A scripted operator session in a real terminal (tmux): demo start, detail screen, stop, start,
# destroy with the typed id, shrink the fleet, ledger query, receipt, leave the demo running
# (its controller listed by `rentwatch ls`), `rentwatch demo` again (attaches to it), quit
# with Stop campaign (the controller exits; nothing left listed).
# Every screen is captured to $OUT (default: a temp dir); the run fails on a traceback in any
# capture, on a detail screen whose money disagrees with the pane it was opened from, or on a
# session that does not end with everything stopped.
#   usage: scripts/tmux_session.sh [OUT_DIR]      (needs tmux; no network, no account)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
rentwatch=${RENTWATCH:-$here/.venv/bin/rentwatch}
[ -x "$rentwatch" ] || rentwatch=$(command -v rentwatch)
python=${PYTHON:-$(dirname "$rentwatch")/python}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
work=$(mktemp -d)
session="rw-script-$$"
export XDG_DATA_HOME="$work/data" RENTWATCH_RUNTIME_DIR="$work/run" TZ=UTC

n=0
last=""
capture() { # capture NAME: the visible screen, to $out/NN-NAME.txt (its path in $last)
  n=$((n + 1))
  last="$out/$(printf %02d $n)-$1.txt"
  tmux capture-pane -p -t "$session" > "$last"
}
selected() { # the selected pane's id and phase ("ID PHASE"): its header is drawn reversed
  tmux capture-pane -p -e -t "$session" | "$python" -c '
import re, sys
sgr = re.compile(r"\x1b\[([0-9;]*)m")
for line in sys.stdin:
    codes = [c for m in sgr.finditer(line) for c in m.group(1).split(";")]
    plain = sgr.sub("", line)
    m = re.search(r"i:(\d+) .*?\$[\d.]+/h\s+([A-Z]+)", plain)
    if m and "7" in codes:
        print(m.group(1), m.group(2))
        break
'
}
select_in_service() { # move the cursor to a verified instance (idle, working or verified)
  local k
  for k in $(seq 1 40); do tmux send-keys -t "$session" Up; done
  sleep 1
  for k in $(seq 1 40); do
    if selected | grep -Eq ' (IDLE|WORKING|VERIFIED)$'; then return 0; fi
    tmux send-keys -t "$session" Down
    sleep 0.3
  done
  echo "tmux_session: no verified instance to select" >&2
  return 1
}
wait_for() { # wait_for REGEX SECONDS: until the screen matches
  local deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    if tmux capture-pane -p -t "$session" | grep -Eq -- "$1"; then return 0; fi
    sleep 0.5
  done
  capture "timeout"
  echo "tmux_session: never saw /$1/ (captures in $out)" >&2
  return 1
}
keys() { tmux send-keys -t "$session" "$@"; sleep "${PAUSE:-1.5}"; }
cleanup() { # the dashboard, and any controller it left running (this run's registry only)
  tmux kill-session -t "$session" 2> /dev/null || true
  "$rentwatch" ls --json 2> /dev/null | "$python" -c '
import json, os, signal, sys
for row in json.load(sys.stdin):
    os.kill(row["pid"], signal.SIGTERM)
' 2> /dev/null || true
}
trap cleanup EXIT

# a tmux server already running gives a new session its own environment, not this script's:
# without these on the command line the demo used that server's data and runtime dirs
envs="env XDG_DATA_HOME='$XDG_DATA_HOME' RENTWATCH_RUNTIME_DIR='$RENTWATCH_RUNTIME_DIR' TZ=UTC"
tmux new-session -d -s "$session" -x 160 -y 48 \
  "cd '$work' && $envs '$rentwatch' demo; echo rentwatch-left=\$?; sleep 5; $envs '$rentwatch' demo; echo rentwatch-exit=\$?; sleep 600"
wait_for 'VERIFIED|WORKING|IDLE' 240
capture fleet
select_in_service
read -r iid phase <<< "$(selected)"
echo "tmux_session: working on i:$iid ($phase)"

# the detail screen of the selected instance
keys Enter
wait_for 'money so far' 30
wait_for 'market logs' 30
sleep 3 # the market's logs arrive on their own
capture detail
grep -q "i:$iid " "$last" || { echo "tmux_session: the detail is not i:$iid's" >&2; exit 1; }
keys Escape
capture fleet-after-detail

keys s # stop it: a host at work (or in service) asks first, Cancel focused; Tab to Stop it
if tmux capture-pane -p -t "$session" | grep -q "Stop it"; then keys Tab Enter; fi
wait_for "i:$iid .*STOPPED" 90
capture stopped
keys a # and start it again: the engine must not stop it at once (the operator's intent wins)
wait_for "i:$iid .*(BOOTING|RUNNING|VERIFYING|VERIFIED|IDLE|WORKING)" 90
capture started

keys d # destroy: type the id the dialog names, Enter
wait_for 'Type [0-9]+ and press Enter' 10
typed=$(tmux capture-pane -p -t "$session" | grep -oE 'Type [0-9]+ and press' | grep -oE '[0-9]+')
capture destroy-dialog
keys "$typed" Enter
sleep 3
capture destroyed

keys - # shrink the fleet by one (the operator's intent wins over replacement)
capture shrunk

keys l # the ledger screen, one canned query (F3: duds by failure class)
keys F3
wait_for 'row\(s\)|rows [0-9]' 60
capture ledger
keys Escape

keys r # the receipt
sleep 3
capture receipt
keys Escape

keys x # leave: the same question, Leave running focused
wait_for 'Leave running' 10
capture leave-dialog
keys Enter
wait_for 'rentwatch-left=' 60
capture left
"$rentwatch" ls --json > "$work/ls-left.json" # not piped: `grep -q` stops reading at its match
grep -q '"campaign": "demo' "$work/ls-left.json" || {
  echo "tmux_session: the demo left running is not listed" >&2
  exit 1
}
wait_for 'VERIFIED|WORKING|IDLE|STOPPED' 60 # `rentwatch demo` again: attached to it
capture reattached

keys q # quit: Stop campaign (the default)
wait_for 'Stop campaign and quit' 10
capture quit-dialog
keys Enter
wait_for 'rentwatch-exit=' 180
capture exit
[ "$("$rentwatch" ls --json)" = "[]" ] || {
  echo "tmux_session: a controller is still listed after Stop" >&2
  exit 1
}

"$python" - "$out" "$iid" << 'EOF'
"""Check the captures: no traceback anywhere; the detail screen's money for the instance equals
the figure its pane showed the moment before (same billing code); the session ended cleanly."""
import re
import sys
from pathlib import Path

out, iid = Path(sys.argv[1]), sys.argv[2]
caps = sorted(out.glob("*.txt"))
bad = [p.name for p in caps if "Traceback" in p.read_text()]
assert not bad, f"traceback in {bad}"
text = {p.name.split("-", 1)[1][:-4]: p.read_text() for p in caps}
detail = text["detail"]
money = float(re.search(r"money so far\s+\$([\d.]+)", detail).group(1))
pane = re.search(rf"i:{iid} .*?billed \$([\d.]+)", text["fleet-after-detail"])
assert pane, f"i:{iid} is not on the fleet screen after its detail"
billed = float(pane.group(1))  # a second or two of market time later: within a cent
assert abs(billed - money) < 0.01, (money, billed)
for name, screen in text.items():  # the header's spend within its own budget bar's figure
    for spent, bar in re.findall(r"spent \$([\d.]+).*?\n.*?budget \S+ \$([\d.]+)/", screen, re.S):
        assert abs(float(spent) - float(bar)) < 0.006, (name, spent, bar)
assert "rentwatch-left=0" in text["left"] and "re-attach with" in text["left"], text["left"]
assert "already running" in text["exit"] and "demo stopped" in text["exit"], text["exit"]
assert "rentwatch-exit=0" in text["exit"], text["exit"][-400:]
print(f"tmux_session: {len(caps)} captures in {out}, no traceback, figures agree")
EOF
