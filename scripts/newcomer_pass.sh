#!/usr/bin/env bash
# A newcomer's pass in a real terminal (tmux), at 80x24, 120x36 and 200x50: `rentwatch demo`
# at the first size, left running and attached again (`rentwatch attach --campaign demo`) at
# the second, `rentwatch demo` again (it attaches) at the third. At each size every screen is
# visited and every key its footer and the help offer is pressed: the fleet's panes and table
# (t), the detail (Enter, g), the help (?), the palette (ctrl+p), the ledger (l, F2..F6, ctrl+a,
# ctrl+e), the receipt (r), the jobs (j, Enter), sort (o), filter (/), the stop, destroy,
# start, bulk-destroy, end, detach and quit dialogs (s d a D E x q, each cancelled). Then the
# README's commands (ls, receipt, jobs, logs, ssh, offers against a simulator of its own), the
# end of the demo from the dashboard (E, the name typed) and Stop campaign and quit;
# `rentwatch end --campaign demo` after it finds nothing left billing.
# Fails on a traceback on any screen, a field of the bar split or cut, a footer that does not
# end at "^p palette", a key that names another instance than the one selected, a screen
# that does not scroll from the keyboard, or anything left running.
#   usage: scripts/newcomer_pass.sh [OUT_DIR]     (needs tmux; no network, no account)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
rentwatch=${RENTWATCH:-$here/.venv/bin/rentwatch}
[ -x "$rentwatch" ] || rentwatch=$(command -v rentwatch)
python=${PYTHON:-$(dirname "$rentwatch")/python}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
work=$(mktemp -d)
mkdir -m 700 "$work/run"
export XDG_DATA_HOME="$work/data" RENTWATCH_RUNTIME_DIR="$work/run" XDG_RUNTIME_DIR="$work/run"
export TZ=UTC
session="rw-newcomer-$$"
# a tmux server already running gives new sessions its own environment, not this script's:
# the dashboard is started with this run's data and runtime dirs named on its command line
envs="env XDG_DATA_HOME='$XDG_DATA_HOME' RENTWATCH_RUNTIME_DIR='$RENTWATCH_RUNTIME_DIR'"
envs+=" XDG_RUNTIME_DIR='$XDG_RUNTIME_DIR' TZ=UTC"
PAUSE=${PAUSE:-0.4}
size=""
sim_pid=""

n=0
last=""
say() { echo "newcomer_pass: [$SECONDS s] $*"; }
fail() {
  echo "newcomer_pass: FAIL at $size: $* (captures in $out)" >&2
  exit 1
}
screen() { tmux capture-pane -p -t "$session"; }
capture() { # capture NAME: the screen to $out/NN-SIZE-NAME.txt, checked at once
  n=$((n + 1))
  last="$out/$(printf %03d $n)-$size-$1.txt"
  screen > "$last"
  if grep -q "Traceback" "$last"; then fail "a traceback on $1"; fi
}
keys() { tmux send-keys -t "$session" "$@"; sleep "$PAUSE"; }
wait_for() { # wait_for REGEX SECONDS
  local deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    if screen | grep -Eq -- "$1"; then return 0; fi
    sleep 0.3
  done
  capture timeout
  fail "never saw /$1/"
}
wait_gone() { # wait_gone REGEX SECONDS: until the screen no longer matches (a dialog closed)
  local deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    if ! screen | grep -Eq -- "$1"; then return 0; fi
    sleep 0.2
  done
  capture still-open
  fail "/$1/ still on screen"
}
back() { # back REGEX: Escape, and wait until what REGEX names has closed
  keys Escape
  wait_gone "$1" 30
}
expect() { # expect NAME REGEX: within 20 s the screen (or a toast) shows REGEX. A toast lasts
  # seconds and a loaded box starts python slowly: the screen is shot every quarter second
  # beside the checks, which read every fourth shot (a second apart) as they come
  capture "$1"
  local base=$last k=4 shot next shooter
  (
    for i in $(seq -w 1 80); do
      [ -e "$base.stop" ] && break
      screen > "$base.s$i"
      sleep 0.25
    done
    touch "$base.done"
  ) &
  shooter=$!
  while :; do
    shot=$base.s$(printf %02d $k)
    next=$base.s$(printf %02d $((k + 1)))
    if [ -e "$next" ] || { [ -e "$base.done" ] && [ -e "$shot" ]; }; then
      if "$python" "$work/check.py" has "$shot" "${size%x*}" "$2" 2> /dev/null; then
        touch "$base.stop"
        wait "$shooter" || true
        mv "$shot" "$base"
        rm -f "$base".s* "$base.stop" "$base.done"
        return 0
      fi
      k=$((k + 4))
    elif [ -e "$base.done" ]; then
      break
    else
      sleep 0.1
    fi
  done
  wait "$shooter" || true
  rm -f "$base".s* "$base.stop" "$base.done"
  check has "$2"
}
check() { # check KIND [ARG]: the last capture, by $work/check.py. A screen a loaded box is still
  # laying out is shot again, for 20 s at most; never for hasnt (what must not show is judged
  # as first seen)
  local deadline=$((SECONDS + 20))
  until "$python" "$work/check.py" "$1" "$last" "${size%x*}" "${2:-}" 2> /dev/null; do
    if [ "$1" = hasnt ] || ((SECONDS >= deadline)); then
      "$python" "$work/check.py" "$1" "$last" "${size%x*}" "${2:-}" ||
        fail "$1 check on $(basename "$last")"
      return 0
    fi
    sleep 0.4
    screen > "$last"
  done
}
selected() { # the selected instance's id: the reversed pane header, or the table's cursor row
  tmux capture-pane -p -e -t "$session" | "$python" "$work/check.py" selected - "${size%x*}"
}
select_in_service() { # the cursor onto a verified instance (idle, working or verified)
  local k
  for k in $(seq 1 12); do tmux send-keys -t "$session" Up; done
  sleep 0.5
  for k in $(seq 1 12); do
    if selected | grep -Eq ' (IDLE|WORKING|VERIFIED|idle|working|verified)$'; then return 0; fi
    tmux send-keys -t "$session" Down
    sleep 0.3
  done
  return 1
}
cleanup() { # the dashboard, this run's controllers (its own registry only), its simulator
  tmux kill-session -t "$session" 2> /dev/null || true
  [ -n "$sim_pid" ] && kill "$sim_pid" 2> /dev/null || true
  "$rentwatch" ls --json 2> /dev/null | "$python" -c '
import json, os, signal, sys
for row in json.load(sys.stdin):
    os.kill(row["pid"], signal.SIGTERM)
' 2> /dev/null || true
}
trap cleanup EXIT

cat > "$work/check.py" << 'EOF'
"""Screen checks: check.py KIND FILE WIDTH [ARG]."""
import re
import sys

kind, path, width, arg = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:] and sys.argv[4]
text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
lines = text.splitlines()

# each field of the bar, label and figure, whole on one line
FIELDS = {
    "in service": r"in service \d+(/\d+| \(\d+ wanted\))",
    "verified": r"verified \d+",
    "creates": r"creates \d+/\d+",
    "duds": r"duds \d+ \(\d+%\)",
    "lost": r"\$[\d.]+ lost",
    "spent": r"spent \$[\d.]+",
    "GPU-h": r"GPU-h [\d.]+",
    "$/GPU-h": r"\$/GPU-h ([\d.]+|-)",
    "quarantined": r"quarantined \d+",
    "/h now": r"\$[\d.]+/h now",
    "budget": r"budget \S+ \$[\d.]+/\$[\d.]+ \(\d+%\)",
    "market time": r"market time \d\d:\d\d:\d\d",
    "sort:": r"sort: \S+",
}


def bar(toasts: bool = False) -> list[str]:
    out = []
    for line in lines:
        if line.startswith(("╭", " id ")) or "▀▀▀" in line:
            break
        if toasts or "▌" not in line:  # a line under a toast is not the bar's to judge
            out.append(line)
    return out


def no(msg: str) -> None:
    print(f"  {msg}", file=sys.stderr)
    sys.exit(1)


SGR = re.compile(r"\x1b\[([0-9;]*)m")


def sgr(params: str, state: set[int]) -> None:
    """Apply one SGR sequence to `state` (bold 1, reverse 7; colours skipped)."""
    ps = [int(p or 0) for p in params.split(";")]
    i = 0
    while i < len(ps):
        p = ps[i]
        if p in (38, 48, 58):
            i += 3 if ps[i + 1 : i + 2] == [5] else 5
            continue
        if p == 0:
            state.clear()
        elif p in (22, 27):
            state.discard(1 if p == 22 else 7)
        elif p in (1, 7):
            state.add(p)
        i += 1


def rows_with_attrs():
    """Each line as plain text with the attributes in force where its text starts (tmux's -e
    capture says only what changes, so bold can carry over from the line above)."""
    state: set[int] = set()
    for line in lines:
        at_text = None
        pos = 0
        for m in SGR.finditer(line):
            if at_text is None and line[pos : m.start()].strip():
                at_text = set(state)
            sgr(m.group(1), state)
            pos = m.end()
        if at_text is None:
            at_text = set(state)
        yield SGR.sub("", line), at_text, {int(c or 0) for m in SGR.finditer(line) for c in m.group(1).split(";")}


def attrs_at(line, needle):
    """The attributes in force where `needle` starts in the raw line (None: not there)."""
    state: set[int] = set()
    pos = 0
    for m in SGR.finditer(line):
        if needle in line[pos : m.start()]:
            return state
        sgr(m.group(1), state)
        pos = m.end()
    return state if needle in line[pos:] else None


if kind == "selected":  # from an -e capture: the reversed pane header, or the cursor row
    for (plain, at_text, codes), raw in zip(rows_with_attrs(), lines):
        m = re.search(r"i:(\d+) .*?\$[\d.]+/h\s+([A-Z]+)", plain)
        # the id itself reversed (a scrollbar's reversed glyph at the line's end is no cursor)
        if m and 7 in (attrs_at(raw, f"i:{m.group(1)}") or ()):
            print(m.group(1), m.group(2))
            break
        m = re.match(r"\s(\d{3,})\s+.*?\s(requested|booting|running|verifying|verified|idle|"
                     r"working|stopped|abandoned|destroyed|lost|outbid)\s", plain)
        if m and 1 in at_text:
            print(m.group(1), m.group(2))
            break
elif kind == "bar":  # the fleet or table screen: the bar's fields whole, the footer whole
    top = bar()
    joined = " ".join(top)
    if not any("in service" in line for line in bar(toasts=True)):
        no(f"no bar on this screen: {top[:2]}")
    for label, rx in FIELDS.items():
        if label in joined and not any(re.search(rx, line) for line in top):
            no(f"the bar's field {label!r} is split or cut: {top}")
    if len(top) > 6:
        no(f"the bar takes {len(top)} lines")
    foot = lines[-1].rstrip()
    if not foot.endswith("^p palette"):
        no(f"the footer does not end at the palette: {foot!r}")
    for key in ("q Quit", "? Help", "E End"):
        if key not in foot:
            no(f"{key!r} not in the footer: {foot!r}")
elif kind == "footer":  # any full screen: the footer ends at the palette, nothing after it
    foot = lines[-1].rstrip()
    if not foot.endswith("^p palette"):
        no(f"the footer does not end at the palette: {foot!r}")
elif kind == "hasnt":  # the screen does not show ARG (a regex)
    if re.search(arg, text):
        no(f"/{arg}/ on screen")
elif kind == "detail":  # the detail screen's head is the selected instance's
    if not re.search(rf"i:{arg}\b", " ".join(lines[:3])):
        no(f"the detail shown is not i:{arg}'s: {lines[:2]}")
elif kind == "has":  # the screen shows ARG (a regex), in its text or in a toast's
    toasts = " ".join(
        " ".join(line.rsplit("▌", 1)[1].rstrip(" │╮╯─▇▆▅▄▃▂▁").split())
        for line in lines
        if "▌" in line
    )
    # a dialog wraps its words: its lines inside its borders, read as one run of text too
    flat = " ".join(
        " ".join(line[line.index("█") + 1 : line.rindex("█")].split())
        for line in lines
        if line.count("█") >= 2
    )
    if not (re.search(arg, text) or re.search(arg, toasts) or re.search(arg, flat)):
        no(f"/{arg}/ not on screen")
elif kind == "table":  # the money columns at every size, the status (last) from 100 columns
    head = next((line for line in lines if line.startswith(" id ")), "")
    want = ("id", "gpu", "phase", "util", "throttle", "billed") + (
        ("status",) if width >= 100 else ()
    )
    missing = [c for c in want if c not in head.split()]
    if missing:
        no(f"table columns out of sight: {missing} in {head!r}")
else:
    no(f"unknown check {kind}")
EOF

scroll_check() { # scroll_check NAME REGEX: End on a screen brings REGEX (its end) into sight
  keys End
  expect "$1-end" "$2" # within a few seconds: a loaded machine scrolls late
}

instance_keys() { # the keys that act on the selected instance, each cancelled, names checked
  local iid phase deep=${1:-deep}
  read -r iid phase <<< "$(selected)"
  [ -n "$iid" ] || {
    capture no-selection
    tmux capture-pane -p -e -t "$session" > "$last.sgr"
    fail "no instance selected"
  }
  say "$size: keys on i:$iid ($phase)"
  keys Enter
  wait_for 'money so far' 20
  wait_for '\^p palette' 30 # the footer (a capture mid-layout at 200x50 had none yet)
  capture detail
  check detail "$iid"
  check footer
  if [ "$deep" = deep ]; then
    keys g
    keys NPage
    # a ledger event's row: "seq │ at │" wide, "at │" under 110 columns (its seq beside the kind)
    scroll_check detail '(?m)^ *([0-9]+ │ )?[0-9:]{8} │ '
  fi
  back 'money so far'
  keys s
  # the instance may have stopped (an idle rule) between its selection and the key
  wait_for 'Stop instance|stopped [0-9]|could not stop|already gone|is stopped already' 30
  capture stop
  if grep -q "Stop instance" "$last"; then
    check has "Stop instance $iid \\("
    back 'Stop instance'
    expect stop-cancelled "stop cancelled: $iid"
  else
    expect stopped "(stopped|could not stop) $iid|$iid is already gone|$iid is stopped already"
  fi
  keys d
  wait_for 'Type [0-9]+ and press Enter' 30
  capture destroy
  check has "Type $iid and press Enter"
  back 'and press Enter to destroy'
  keys a
  expect start "(started|could not start) $iid|$iid is already gone|$iid is [a-z]+: nothing to start|the campaign has ended: it starts"
}

pass_at() { # pass_at WxH: every screen and key at this size (the session runs at it)
  size=$1
  say "$size"
  tmux resize-window -t "$session" -x "${size%x*}" -y "${size#*x}" 2> /dev/null || true
  sleep 1.5
  keys Escape # a toast or a leftover dialog
  capture fleet
  check bar
  keys '?'
  wait_for 'rentwatch keys' 30
  capture help
  scroll_check help 'Close this help' # the help's own keys, last
  back 'rentwatch keys'
  keys C-p
  wait_for 'Search for commands' 30
  capture palette
  tmux send-keys -t "$session" -l "Help: the keys"
  sleep "$PAUSE"
  keys Enter
  wait_for 'rentwatch keys' 30
  back 'rentwatch keys'

  select_in_service || say "$size: no verified instance in sight: the first one instead"
  instance_keys
  keys t
  capture table
  check bar
  check table
  instance_keys shallow
  keys t

  keys o
  keys o
  expect sorted 'sort: state|sorted by state'
  keys o o o # back to new
  keys /
  wait_for 'Enter keeps it' 30 # the filter's input open
  tmux send-keys -t "$session" -l "RTX"
  keys Enter
  wait_gone 'Enter keeps it' 30 # the filter's input closed
  wait_for 'q Quit' 30 # the footer is the fleet's again
  capture filtered
  check bar
  keys /
  wait_for '▊ +RTX' 30 # the filter's input open, with the filter applied
  keys C-u Enter
  wait_gone '▊ +(RTX|filter as you type)' 30
  keys D
  expect bulk 'Destroy these [0-9]+ stopped|no stopped rental'
  back 'Destroy these [0-9]+ stopped'
  keys E
  wait_for "Type the campaign's name" 30
  capture end-dialog
  back "Type the campaign's name"
  expect end-cancelled 'end cancelled'

  keys l
  wait_for 'row\(s\)|rows [0-9]' 30
  wait_for '\^p palette' 30
  capture ledger
  check footer
  check has 'F6 throttled'
  for f in F2 F3 F4 F5 F6; do
    keys "$f"
    wait_for 'row\(s\)|rows [0-9]|query failed' 30
    capture "ledger-$f"
    check hasnt 'query failed|refused'
  done
  keys C-a
  keys C-e
  expect export 'rentwatch-query.csv'
  keys Escape
  back 'F6 throttled'
  keys r
  wait_for 'USD spent in all' 20
  wait_for '\^p palette' 30
  sleep 1
  capture receipt
  check footer
  scroll_check receipt 'hosts: renter-side'
  back 'hosts: renter-side'
  keys j
  wait_for ' jobs .*in all|this campaign has none' 20
  wait_for '\^p palette' 30
  capture jobs
  check footer
  check has 'demo-1'
  keys Enter # the selected job's output, followed
  wait_for 'output from|could not read it' 20
  capture job-output
  check hasnt 'could not read it'
  back 'output from'
  back ' in all '

  keys x
  wait_for 'Leave running' 30
  capture detach-dialog
  back 'Stop campaign and quit'
  keys q
  wait_for 'Stop campaign and quit' 30
  capture quit-dialog
  check has 'rentwatch end --campaign demo .*--destroy` (later|while it runs)' # pasteable: ledger, market named
  back 'Stop campaign and quit'
  capture fleet-again
  check bar
}

t0=$SECONDS
tmux new-session -d -s "$session" -x 80 -y 24 \
  "cd '$work' && $envs '$rentwatch' demo; echo rentwatch-left=\$?; sleep 600"
wait_for 'VERIFIED|WORKING|IDLE' 240
pass_at 80x24
keys x # leave it running, and attach from a terminal of another size
wait_for 'Leave running' 30
keys Enter
wait_for 'rentwatch-left=' 60
capture left
check has 'rentwatch-left=0'
check hasnt 'stopping demo'
tmux kill-session -t "$session"
# to a file first: `grep -q` stops reading at its match, and a pipe's writer then fails (pipefail)
"$rentwatch" ls --json > "$out/ls-left.json"
grep -q '"campaign": "demo' "$out/ls-left.json" || fail "the demo left running is not listed"

tmux new-session -d -s "$session" -x 120 -y 36 \
  "cd '$work' && $envs '$rentwatch' attach --campaign demo; echo attach-left=\$?; sleep 600"
wait_for 'in service' 60
pass_at 120x36
keys x
wait_for 'Leave running' 30
keys Enter
wait_for 'attach-left=0' 60
tmux kill-session -t "$session"

tmux new-session -d -s "$session" -x 200 -y 50 \
  "cd '$work' && $envs '$rentwatch' demo; echo rentwatch-exit=\$?; sleep 600"
wait_for 'in service' 60
pass_at 200x50

# the README's commands beside the running demo
size=cli
"$rentwatch" ls > "$out/cli-ls.txt"
grep -q demo "$out/cli-ls.txt" || fail "rentwatch ls does not list the demo"
ledger=$("$rentwatch" ls --json | "$python" -c 'import json,sys; print(json.load(sys.stdin)[0]["ledger"])')
"$rentwatch" receipt --ledger "$ledger" > "$out/cli-receipt.txt"
grep -q "USD spent in all" "$out/cli-receipt.txt" || fail "rentwatch receipt"
"$rentwatch" jobs --ledger "$ledger" --json > "$out/cli-jobs.json"
"$python" -c 'import json,sys; rows = json.load(open(sys.argv[1]))
assert rows and {"job", "state", "instance_id", "progress", "eta_min", "usd"} <= set(rows[0])' \
  "$out/cli-jobs.json" || fail "rentwatch jobs --json: $(head -c 300 "$out/cli-jobs.json")"
"$rentwatch" logs demo-1 --ledger "$ledger" > "$out/cli-logs.txt" 2>&1 || fail "rentwatch logs demo-1"
held=$("$rentwatch" ledger --ledger "$ledger" --csv \
  "select instance_id from instances where verified_at is not null and destroyed_at is null limit 1" | tail -n 1)
if [ -n "$held" ] && [ "$held" != instance_id ]; then
  "$rentwatch" ssh "$held" --print > "$out/cli-ssh.txt" 2>&1 || grep -q "no way in" "$out/cli-ssh.txt" ||
    fail "rentwatch ssh $held: $(cat "$out/cli-ssh.txt")"
fi
port=$((20000 + $$ % 20000))
"$rentwatch" sim --port "$port" > "$work/sim.out" 2>&1 &
sim_pid=$!
for _ in $(seq 1 40); do grep -q "api key" "$work/sim.out" 2> /dev/null && break; sleep 0.25; done
VAST_API_KEY=$(sed -n 's/^api key: //p' "$work/sim.out") "$rentwatch" offers \
  --campaign "$here/examples/campaign.toml" --market-url "http://127.0.0.1:$port" \
  > "$out/cli-offers.txt" 2>&1 || fail "rentwatch offers: $(tail -3 "$out/cli-offers.txt")"
grep -q "would be rented" "$out/cli-offers.txt" || fail "rentwatch offers printed no ranking"
kill "$sim_pid" && sim_pid=""

# a clean end from the dashboard: E, the name typed; then Stop campaign and quit
size=200x50
keys E
wait_for "Type the campaign's name" 30
tmux send-keys -t "$session" -l demo
keys Enter
wait_for 'ended demo|could not end' 60
expect ended 'ended demo'
keys q
wait_for 'Stop campaign and quit' 30
keys Enter
wait_for 'rentwatch-exit=' 120
capture exit
check has 'rentwatch-exit=0'
[ "$("$rentwatch" ls --json)" = "[]" ] || fail "a controller is still listed after Stop"
"$rentwatch" end --campaign demo --yes demo > "$out/cli-end.txt" 2>&1 ||
  fail "rentwatch end after the end: $(cat "$out/cli-end.txt")"
grep -q "nothing of demo is left billing" "$out/cli-end.txt" || fail "rentwatch end: $(cat "$out/cli-end.txt")"
say "$n captures in $out, three sizes, $((SECONDS - t0)) s: no traceback, no cut field, every key on its instance"
