#!/usr/bin/env bash
# A scripted operator session in a real terminal (tmux): demo start, detail screen, stop, start,
# destroy with the typed id, shrink the fleet, ledger query, receipt, quit (stop all).
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
capture() { # capture NAME: the visible screen, to $out/NN-NAME.txt
  n=$((n + 1))
  tmux capture-pane -p -t "$session" > "$out/$(printf %02d $n)-$1.txt"
  echo "$out/$(printf %02d $n)-$1.txt"
}
wait_for() { # wait_for REGEX SECONDS: until the screen matches
  local deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    if tmux capture-pane -p -t "$session" | grep -Eq -- "$1"; then return 0; fi
    sleep 0.5
  done
  capture "timeout" > /dev/null
  echo "tmux_session: never saw /$1/ (captures in $out)" >&2
  return 1
}
keys() { tmux send-keys -t "$session" "$@"; sleep "${PAUSE:-1.5}"; }
cleanup() { tmux kill-session -t "$session" 2> /dev/null || true; }
trap cleanup EXIT

tmux new-session -d -s "$session" -x 160 -y 48 \
  "cd '$work' && '$rentwatch' demo; echo rentwatch-exit=\$?; sleep 600"
wait_for 'VERIFIED|WORKING' 240
capture fleet > /dev/null

# the detail screen of the selected instance (the first pane); its id is in its header
keys Enter
wait_for 'money so far' 30
wait_for 'market logs' 30
sleep 3 # the market's logs arrive on their own
detail=$(capture detail)
iid=$(grep -oE '^ *i:[0-9]+' "$detail" | head -1 | grep -oE '[0-9]+')
keys Escape
capture fleet-after-detail > /dev/null

keys s # stop the selected instance
wait_for 'STOPPED|stopped' 60
capture stopped > /dev/null
keys a # and start it again
sleep 5
capture started > /dev/null

keys d # destroy: type the id the dialog names, Enter
wait_for 'Type [0-9]+ and press Enter' 10
typed=$(tmux capture-pane -p -t "$session" | grep -oE 'Type [0-9]+ and press' | grep -oE '[0-9]+')
capture destroy-dialog > /dev/null
keys "$typed" Enter
sleep 3
capture destroyed > /dev/null

keys - # shrink the fleet by one (the operator's intent wins over replacement)
capture shrunk > /dev/null

keys l # the ledger screen, one canned query (F3: duds by failure class)
keys F3
sleep 2
capture ledger > /dev/null
keys Escape

keys r # the receipt
sleep 3
capture receipt > /dev/null
keys Escape

keys q # quit: Stop all (the default)
wait_for 'Stop all and quit' 10
capture quit-dialog > /dev/null
keys Enter
wait_for 'rentwatch-exit=' 180
capture exit > /dev/null

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
if pane:  # the pane's bill a moment later is at least the detail's, and close to it
    billed = float(pane.group(1))
    assert money <= billed + 1e-4 and billed - money < 0.05, (money, billed)
for name, screen in text.items():  # the header's spend within its own budget bar's figure
    for spent, bar in re.findall(r"spent \$([\d.]+).*?\n.*?budget \S+ \$([\d.]+)/", screen, re.S):
        assert abs(float(spent) - float(bar)) < 0.006, (name, spent, bar)
assert "rentwatch-exit=0" in text["exit"], text["exit"][-400:]
print(f"tmux_session: {len(caps)} captures in {out}, no traceback, figures agree")
EOF
