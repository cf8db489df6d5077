#!/usr/bin/env bash
# Prints a `go test -run` pattern that matches every test of the given package directories
# (recursively) whose run differs without the race detector: the tests that read the
# raceEnabled constant, directly or through helpers that do (found transitively), and every
# test in a file built only without -race. make test runs those packages in full under -race,
# then only these tests without it, so that a test which skips or relaxes a check under -race
# still runs its full form once, and no other test runs twice.
#
#   scripts/race-divergent-tests.sh transport collective topology bench
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 DIR..." >&2; exit 2; }
files=$(find "$@" -name '*_test.go' | sort)
[ -n "$files" ] || { echo "$0: no test files under $*" >&2; exit 1; }

# enclosing prints, for each line matching the regexp $1 inside a top-level func's body, the
# name of that func (a declaration outside any func, such as raceEnabled's own, names none).
enclosing() {
	# shellcheck disable=SC2086
	awk -v re="$1" '
		FNR == 1 || /^(var|const|type|import) / { name = "" }
		/^[ \t]*\/\// { next }
		/^func / { name = $0; sub(/^func (\([^)]*\) )?/, "", name); sub(/[\[(].*/, "", name) }
		$0 ~ re && name != "" { print name }
		/^}/ { name = "" }
	' $files | sort -u
}

found=""
while :; do
	names=$(echo raceEnabled $found | tr ' ' '|')
	next=$(enclosing "(^|[^A-Za-z0-9_])($names)([^A-Za-z0-9_]|\$)" | tr '\n' ' ')
	[ "$next" = "$found" ] && break
	found=$next
done
# Tests in files built only without -race.
for f in $files; do
	if awk 'NR <= 5 && /^\/\/go:build .*!race/ { hit = 1 } END { exit !hit }' "$f"; then
		found="$found $(grep -Eo '^func (Test|Benchmark|Example|Fuzz)[A-Za-z0-9_]*' "$f" | sed 's/^func //' | tr '\n' ' ' || true)"
	fi
done
tests=$(echo "$found" | tr ' ' '\n' | { grep -E '^(Test|Example|Fuzz)' || true; } | sort -u | tr '\n' '|')
if [ -z "$tests" ]; then
	echo "$0: no test under $* reads raceEnabled; make test would run none of them without -race" >&2
	exit 1
fi
echo "^(${tests%|})\$"
