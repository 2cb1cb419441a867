#!/bin/bash
# Remove one protection (replace FROM with TO in FILE), run the given tests, restore the file,
# and say whether a test caught the removal. Used for docs/reliability.md.
# usage: audit.sh DESC FILE FROM TO TESTS...
desc="$1"; file="$2"; from="$3"; to="$4"; shift 4
python3 - "$file" "$from" "$to" <<'EOF'
import sys
p, a, b = sys.argv[1:4]
s = open(p).read()
assert a in s, ("pattern not found", a)
open(p, "w").write(s.replace(a, b, 1))
EOF
out=$(timeout 300 python -m pytest -q -x "$@" 2>&1 | tail -3)
git checkout -q -- "$file"
if echo "$out" | grep -qiE "failed|error"; then echo "$desc: caught (a test fails without it)"; else echo "$desc: NOT caught"; fi
