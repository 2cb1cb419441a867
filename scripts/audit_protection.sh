#!/bin/bash
# Remove one protection (replace FROM with TO in FILE), run the given tests, restore the file,
# and say whether a test caught the removal. Used for docs/reliability.md.
# usage: audit.sh DESC FILE FROM TO TESTS...
#        audit.sh --boundary     (each protection of issue 14's boundary work, in turn)
#        audit.sh --hostile      (issue 14's engine half, the hostile market's finds, the service)
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
    'return self.__sandbox.run(sql, limit, offset, tag, timeout_s)' \
    'with self.__lock: return self.__sandbox.run(sql, limit, offset, tag, timeout_s)' $q
  b=tests/test_query_bounds.py
  $a "sandbox memory capped" app/ledger/readonly.py '"memory_limit": QUERY_MEMORY_LIMIT,' '"memory_limit": "8GB",' $b
  $a "sandbox threads capped" app/ledger/readonly.py '"threads": QUERY_THREADS,' '' $b
  $a "sandbox spills nothing to disk" app/ledger/readonly.py '"max_temp_directory_size": "0KB",' '' $b
  $a "a query's time bounded" app/ledger/readonly.py '        timer.start()' '        pass' $b
  $a "rows per page capped" app/ledger/readonly.py \
    'limit = min(max(0, int(limit)), MAX_ROW_LIMIT)' 'limit = max(0, int(limit))' $b
  $a "text per page capped" app/ledger/readonly.py '        if size > MAX_PAGE_BYTES:' '        if False:' $b
  $a "escape sequences stripped" app/core/text.py 's = _SEQUENCES.sub("", s)' 's = s' $s
  $a "bidi and invisible characters stripped" app/core/text.py 's = _INVISIBLE.sub("", s)' 's = s' $s
  $a "ledger output cleaned" app/ledger/export.py 'return clean(v, CELL_LIMIT)' 'return str(v)' $s
  $a "receipt text cleaned" app/ledger/receipt.py \
    'r["campaign"] = clean(raw_campaign, 120)' 'r["campaign"] = raw_campaign' $s
  $a "pane text cleaned" widgets/render.py 'Text(clean(s.gpu_name, 40))' 'Text(s.gpu_name)' $s
  $a "error lines cleaned" app/cli.py '{clean(exc, 1000)}' '{exc}' $s
  $a "headless log cleaned" app/headless.py 'text = clean(line, 2000)' 'text = line' \
    tests/test_hostile_market.py::test_escapes_from_the_market_reach_no_output
  $a "non-UTF-8 files are one line" app/commands.py \
    'return data.decode("utf-8")' 'return data.decode("utf-8", "surrogateescape")' $e
  $a "market checked before a headless run" app/commands.py \
    '    asyncio.run(_check_market(args.market_url, key, args.http_timeout))' '    pass' $e
  $a "ledger creation errors typed" app/ledger/store.py \
    'except OSError as exc:  # a folder' 'except ZeroDivisionError as exc:  # a folder' $e
  exit 0
fi
if [ "$1" = "--hostile" ]; then
  # issue 14's engine half and what the hostile market found after it (docs/reliability.md)
  a="$0"; u=tests/test_supervisor_unit.py; h=tests/test_hostile_market.py
  $a "a missing row is unseen, not lost" app/observer.py \
    '                listed = await self._ask(a, now)' '                listed = self._lost(a, now, "first miss")' \
    $u::test_an_instance_left_out_of_a_list_is_unseen_not_lost $h::test_a_row_missing_from_list_answers_leaks_nothing
  $a "a create answer naming a held id is not believed" app/actions.py \
    'return 0 < instance_id < MAX_ID and instance_id not in self.fleet.attempts' 'return True' \
    $u::test_a_create_answer_naming_a_held_verified_instance_is_not_believed
  $a "a bad row costs one row (observer)" app/observer.py \
    '    """Why a market row cannot be believed (None: it can)."""' '    return None' \
    $u::test_one_bad_row_costs_one_row_not_the_poll
  $a "a bad row answered directly is not unseen" app/observer.py \
    'except BadRow as exc:' 'except ZeroDivisionError as exc:' \
    $h::test_a_nan_row_costs_one_row_not_the_fleets_supervision
  $a "offers with negative or non-finite prices unfit" app/core/offers/choice.py \
    'return all(math.isfinite(p) and p >= 0 for p in prices)' 'return True' \
    $u::test_offers_with_a_negative_or_non_finite_price_are_unfit
  $a "storage and bandwidth prices checked too" app/core/offers/choice.py \
    'prices = (o.dph_total, o.dph_base, o.storage_cost, o.inet_up_cost, o.inet_down_cost)' \
    'prices = (o.dph_total, o.dph_base)' $u::test_offers_with_a_negative_or_non_finite_price_are_unfit
  w=tests/test_written_off.py
  $a "a written-off instance listed again is held again" app/observer.py \
    '            if a.life.phase == Phase.LOST and a.instance_id in live:' '            if False:' \
    $w $h::test_an_instance_written_off_then_listed_again_is_held_again
  $a "a written-off instance in a filtered answer is held again" app/observer.py \
    '            if held is not None and held.life.phase == Phase.LOST:' '            if False:' \
    $w::test_a_written_off_instance_in_a_filtered_answer_is_held_again
  $a "the ledger voids a write-off that a return answers" app/ledger/schema.py \
    "WHERE NOT (e.kind = 'lost' AND EXISTS (" "WHERE NOT (false AND EXISTS (" $w
  g=tests/test_billing_gaps.py; r=tests/test_restart_ledger.py
  $a "a start of running dated by the market's uptime" app/observer.py \
    '            changed = self._ran_from(a, inst, now) if status == "running" else now' \
    '            changed = now' $g::test_a_start_of_running_seen_late_is_dated_by_the_rows_uptime \
    $h::test_an_instance_written_off_then_listed_again_is_held_again
  $a "a dark host's stopped status is no sign it is back (ledger)" app/ledger/schema.py \
    "WHEN kind = 'status' AND detail->>'status' = 'stopped' THEN 'seen'" "WHEN false THEN 'seen'" $g
  $a "a dark host's stopped status is no sign it is back (engine)" app/observer.py \
    'if a.status == "offline" and status not in ("offline", "stopped"):' \
    'if a.status == "offline" and status != "offline":' $g
  $a "a status changed while nobody watched is written down at the restart" app/recovery.py \
    'if owned and inst.known_status is not None and inst.known_status != said:' 'if False:' $g
  $a "a labelled rental with no create gets one when adopted" app/recovery.py \
    'if owned and create is None and self.ours(inst):' 'if False:' $r
  $a "a create's intent carries its storage price" app/actions.py '"storage_dph": storage_dph,' '' $r
  $a "a poll's list gives up after two tries" app/client.py \
    'attempts = min(attempts, POLL_ATTEMPTS)' 'attempts = attempts' \
    tests/test_client_boundary.py::test_a_polls_list_gives_up_after_two_tries_other_calls_keep_retrying
  $a "an abandoned rental's failed destroy is made again" app/actions.py \
    '            if a.life.phase == Phase.ABANDONED and not a.passed_preflight:' '            if False:' \
    $w::test_a_failed_destroy_of_an_abandoned_instance_is_made_again_next_poll
  $a "no create could pass the budget" app/core/offers/choice.py \
    '        if committed + cost > budget:' '        if False:' \
    $u::test_no_create_could_take_spend_past_the_budget
  $a "GPU names compared cleaned" app/core/preflight/gpu_specs.py \
    'n = clean(name, 200).replace' 'n = name.replace' $h::test_a_gpu_name_is_compared_cleaned
  $a "a market lost mid-run is one line, exit 4" app/headless.py \
    'if isinstance(exc, RentwatchError):  # an error we name' 'if False:' \
    "$h::test_a_market_lost_mid_run_is_one_line_and_exit_4[401-not authorised]"
  $a "a market down for good ends the run" app/headless.py \
    'outcome = await _run_watched(sup)' 'outcome = await sup.run()' \
    "$h::test_a_market_lost_mid_run_is_one_line_and_exit_4[503-marketplace unavailable]"
  $a "attached dashboards send typed intents" app/service/client.py \
    '            wired = wire_intent(intent)' '            wired = intent' \
    tests/test_service.py::test_campaign_served_while_it_runs
  $a "attached dashboards see the campaign's end" app/service/server.py \
    '                if snap is not sent:' '                if False:' \
    tests/test_service.py::test_an_attached_dashboard_sees_the_campaigns_end
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
