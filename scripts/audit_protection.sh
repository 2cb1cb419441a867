#!/bin/bash
# Remove one protection (replace FROM with TO in FILE), run the given tests, restore the file,
# and say whether a test caught the removal. Used for docs/reliability.md.
# usage: audit.sh DESC FILE FROM TO TESTS...
#        audit.sh --boundary     (each protection of issue 14's boundary work, in turn)
if [ "$1" = "--boundary" ]; then
  a="$0"; q=tests/test_query_sandbox.py; s=tests/test_sanitise.py; e=tests/test_cli_errors.py
  $a "parser admits only plain reads" app/ledger/readonly.py \
    'if st.type != duckdb.StatementType.SELECT:' 'if False:' $q
  $a "EXPLAIN ANALYZE refused" app/ledger/readonly.py \
    '_EXPLAIN_OPTIONS_REFUSED = {"ANALYZE", "ANALYSE"}' '_EXPLAIN_OPTIONS_REFUSED: set[str] = set()' $q
  $a "read-only transaction" app/ledger/readonly.py \
    'cur.execute("BEGIN TRANSACTION READ ONLY")' 'cur.execute("BEGIN TRANSACTION")' $q
  $a "external access off" app/ledger/readonly.py \
    '"enable_external_access": False' '"enable_external_access": True' $q
  $a "configuration locked" app/ledger/readonly.py '"lock_configuration": True' '"lock_configuration": False' $q
  $a "no extension autoload" app/ledger/readonly.py \
    '"autoload_known_extensions": False' '"autoload_known_extensions": True' $q
  $a "queries off the controller's lock" app/ledger/store.py \
    'return self.__sandbox.run(sql, limit, offset)' 'with self.__lock: return self.__sandbox.run(sql, limit, offset)' $q
  $a "escape sequences stripped" app/core/text.py 's = _SEQUENCES.sub("", s)' 's = s' $s
  $a "bidi and invisible characters stripped" app/core/text.py 's = _INVISIBLE.sub("", s)' 's = s' $s
  $a "ledger output cleaned" app/ledger/export.py 'return clean(v, CELL_LIMIT)' 'return str(v)' $s
  $a "receipt text cleaned" app/ledger/receipt.py \
    'r["campaign"] = clean(raw_campaign, 120)' 'r["campaign"] = raw_campaign' $s
  $a "pane text cleaned" widgets/render.py 'Text(clean(s.gpu_name, 40))' 'Text(s.gpu_name)' $s
  $a "error lines cleaned" app/cli.py '{clean(exc, 1000)}' '{exc}' $s
  $a "headless log cleaned" app/headless.py 'text = clean(line, 2000)' 'text = line' \
    tests/test_hostile_market.py::test_escapes_from_the_market_reach_no_output
  $a "non-UTF-8 files are one line" app/cli.py \
    'return data.decode("utf-8")' 'return data.decode("utf-8", "surrogateescape")' $e
  $a "market checked before a headless run" app/cli.py \
    '    asyncio.run(_check_market(args.market_url, key, args.http_timeout))' '    pass' $e
  $a "ledger creation errors typed" app/ledger/store.py \
    'except OSError as exc:  # a folder' 'except ZeroDivisionError as exc:  # a folder' $e
  exit 0
fi
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
