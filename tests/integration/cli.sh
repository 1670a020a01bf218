#!/usr/bin/env bash
# Both programs: --help and --version exit 0, unknown options exit 2, bad config exits 2,
# an unusable data directory exits 1 with a message naming it.
. "$(dirname "$0")/lib.sh"

"$DEDUPD_BIN" --help | grep -q -- '--data-dir' || fail "dedupd --help"
"$DEDUPD_BIN" --version | grep -q '^dedupd ' || fail "dedupd --version"
"$DEDUPD_CTL_BIN" --help | grep -q -- '--json' || fail "dedupd-ctl --help"
"$DEDUPD_CTL_BIN" --version | grep -q '^dedupd-ctl ' || fail "dedupd-ctl --version"

rc=0; "$DEDUPD_BIN" --no-such-option 2>"$TEST_TMP/err" || rc=$?
[ "$rc" -eq 2 ] || fail "dedupd unknown option exit $rc, want 2"
grep -q "^dedupd: unknown option" "$TEST_TMP/err" || fail "error names the program"

rc=0; "$DEDUPD_CTL_BIN" --no-such-option 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "dedupd-ctl unknown option exit $rc, want 2"

printf '[server]\ncolour = blue\n' >"$TEST_TMP/bad.ini"
rc=0; "$DEDUPD_BIN" -c "$TEST_TMP/bad.ini" 2>"$TEST_TMP/err" || rc=$?
[ "$rc" -eq 2 ] || fail "bad config exit $rc, want 2"
grep -q "unknown setting \[server\] colour" "$TEST_TMP/err" || fail "bad config message"

# A data directory that is a regular file cannot be opened: runtime error, exit 1.
touch "$TEST_TMP/notadir"
rc=0; timeout 20 "$DEDUPD_BIN" -d "$TEST_TMP/notadir" -l "127.0.0.1:$(free_port)" \
    2>"$TEST_TMP/err" || rc=$?
[ "$rc" -eq 1 ] || fail "unusable data dir exit $rc, want 1"
grep -q "notadir" "$TEST_TMP/err" || fail "error names the data directory"
echo "ok"
