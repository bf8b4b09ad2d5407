#!/usr/bin/env bash
# starter.sh: turn this checkout into a starter for a service of your own
# (docs/FORKING.md). It renames the Go module to MODULE and removes what
# only shows or proves oncepay: the demo UI (web/), the demo-mode endpoints
# (internal/demo), the chaos run and the benchmarks, with their Makefile
# targets and the pages and lines of the docs that describe only them.
#
#   scripts/starter.sh MODULE          in place, in a checkout without
#                                      uncommitted changes (git undoes it);
#                                      the result is staged, to commit
#   scripts/starter.sh MODULE DIR      in a new folder DIR: a copy of the
#                                      checkout's files (git ls-files), made
#                                      a git repository
#   scripts/starter.sh --check         make test's check: a starter in a
#                                      throwaway copy, then its gofmt, vet
#                                      and tests (DATABASE_URL)
#
# What goes is whole files and folders (REMOVE below) and, in the files
# that stay, the blocks between a line with "starter:remove begin" and the
# next with "starter:remove end" (in whatever comment the file has), and
# the single lines that carry "starter:remove line" (a row of a Markdown
# table, which a comment line between rows would break). The
# script fails, and says where, when a block is unbalanced, a path it
# would remove is missing, or the result still names a removed path or
# does not build and vet.
set -euo pipefail

# Removed whole, relative to the checkout. A path that no longer exists is
# an error: this list is kept with the tree.
REMOVE=(
  web
  internal/demo
  internal/app/demo.go
  internal/app/demo_test.go
  internal/app/browser_test.go
  internal/app/browser_giveup_test.go
  proving/chaos
  proving/cmd/chaos
  proving/cmd/bench
  proving/cmd/outboxbench
  scripts/bench-citus.sh
  scripts/bench-compare.sh
  docs/DEMO.md
  docs/screenshot.png
  scripts/starter.sh
  scripts/starter_test.go
)
# Named nowhere in what a reader of the result follows: the README, the
# pages under docs/, the Makefile, the scripts, the deployment files and
# the API description (Go code that imports what is gone fails to build).
# The records of measurements and chaos runs (docs/BENCHMARKS.md,
# docs/RELIABILITY.md, docs/log/) stay as they were: they are why the
# defaults are what they are, made by tools the starter does without.
GONE_PATTERN='internal/demo|proving/chaos|proving/cmd/(chaos|bench|outboxbench)|scripts/(bench-citus|bench-compare|starter)\.sh|DEMO\.md|screenshot\.png|(^|[ `(])web/|make (starter|chaos|bench|overload)'
GONE_CHECKED=(README.md docs Makefile scripts .ci Dockerfile docker-compose.yml deploy openapi)
GONE_RECORDS=(--exclude=BENCHMARKS.md --exclude=RELIABILITY.md --exclude-dir=log)
MARK_BEGIN='starter:remove begin'
MARK_END='starter:remove end'
MARK_LINE='starter:remove line'

die() { echo "starter.sh: $*" >&2; exit 1; }

usage() {
  echo "usage: scripts/starter.sh MODULE [DIR]   (e.g. example.com/acme/pay; docs/FORKING.md)" >&2
  echo "       scripts/starter.sh --check" >&2
  exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)
export GOTOOLCHAIN="${GOTOOLCHAIN:-$(sed -n 's/^toolchain //p' "$root/go.mod")}"
GO=${GO:-go}

# copy_checkout DIR: the checkout's tracked files, as they are in the work
# tree, into DIR (new or empty), made a git repository with them added.
copy_checkout() {
  local dir=$1
  if [ -e "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
    die "$dir exists and is not empty: name a new folder"
  fi
  mkdir -p "$dir"
  (cd "$root" && git ls-files -z --cached | xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
    tar --null -T - -cf -) | tar -C "$dir" -xf -
  git -C "$dir" init -q
}

# cut_marked FILE: FILE without its marked blocks; fails on an unbalanced
# marker, naming the file and the line.
cut_marked() {
  local f=$1 tmp
  tmp=$(mktemp)
  if ! awk -v b="$MARK_BEGIN" -v e="$MARK_END" -v l="$MARK_LINE" -v f="$f" '
      index($0, b) { if (open) { printf "starter.sh: %s:%d: a second \"%s\" before \"%s\" (line %d)\n", f, NR, b, e, open > "/dev/stderr"; bad = 1; exit 1 } open = NR; next }
      index($0, e) { if (!open) { printf "starter.sh: %s:%d: \"%s\" without a \"%s\" before it\n", f, NR, e, b > "/dev/stderr"; bad = 1; exit 1 } open = 0; cut = 1; next }
      index($0, l) { cut = 1; next }
      open { next }
      # A cut between two blank lines leaves one.
      cut && $0 == "" && blank { cut = 0; next }
      { print; blank = ($0 == ""); cut = 0 }
      END { if (!bad && open) { printf "starter.sh: %s:%d: \"%s\" never ended (\"%s\")\n", f, open, b, e > "/dev/stderr"; exit 1 } }
    ' "$f" >"$tmp"; then
    rm -f "$tmp"
    return 1
  fi
  cat "$tmp" >"$f" # keeps the file's mode
  rm -f "$tmp"
}

# make_starter DIR MODULE: the transformation, in DIR.
make_starter() {
  local dir=$1 module=$2 old p f files=0 lines=0 bad=0
  cd "$dir"
  old=$(awk '$1 == "module" { print $2; exit }' go.mod)
  [ -n "$old" ] || die "go.mod names no module"
  [ "$old" != "$module" ] || die "the module is already $module"

  for p in "${REMOVE[@]}"; do
    [ -e "$p" ] || die "$p is gone already: is this a starter? (scripts/starter.sh lists what it removes)"
  done
  for p in "${REMOVE[@]}"; do
    files=$((files + $(find "$p" -type f | wc -l)))
    lines=$((lines + $({ find "$p" -type f -exec grep -Ic '' {} + 2>/dev/null || true; } | awk -F: '{ s += $NF } END { print s + 0 }')))
    rm -rf "$p"
  done

  # The marked blocks (the script itself is gone by now).
  local before after
  while IFS= read -r f; do
    before=$(wc -l <"$f")
    cut_marked "$f" || bad=1
    after=$(wc -l <"$f")
    lines=$((lines + before - after))
  done < <(grep -rlIF --exclude-dir=.git --exclude-dir=.data -e "$MARK_BEGIN" -e "$MARK_END" -e "$MARK_LINE" . | sort)
  [ "$bad" = 0 ] || die "unbalanced markers: nothing was checked"

  # Nothing left names what is gone.
  if grep -rnIE "${GONE_RECORDS[@]}" "$GONE_PATTERN" "${GONE_CHECKED[@]}" >&2; then
    die "the lines above name something the starter removed: mark them (docs/FORKING.md)"
  fi
  if grep -rnIF --exclude-dir=.git --exclude-dir=.data --exclude-dir=bin "starter:remove" . >&2; then
    die "the lines above still carry a starter marker"
  fi
  # The module path, everywhere it is written (go.mod, imports, tools/go.mod, docs).
  while IFS= read -r f; do
    OLD="$old" NEW="$module" perl -pi -e 's/\Q$ENV{OLD}\E/$ENV{NEW}/g' "$f"
  done < <(grep -rlIF --exclude-dir=.git --exclude-dir=.data -e "$old" . | sort)

  # Imports keep their order under the new path; modules only the removed
  # code needed leave go.mod.
  "$("$GO" env GOROOT)/bin/gofmt" -w $(find . -name '*.go' -not -path './.data/*' -not -path './.git/*')
  "$GO" mod tidy
  "$GO" -C tools mod tidy

  "$GO" build ./... || die "the starter does not build"
  "$GO" vet ./... || die "the starter's tests do not vet"
  # Staged, so that git ls-files (make lint) lists the starter's files and
  # git diff --cached shows what changed, ready to commit.
  git add -A
  echo "starter.sh: $module in $dir: removed $files files and $lines lines; the module renamed from $old (staged: git diff --cached)"
}

case "${1:-}" in
  "" | -h | --help) usage ;;
  --check)
    [ $# -eq 1 ] || usage
    [ -n "${DATABASE_URL:-}" ] || die "--check needs DATABASE_URL (make starter-check sets it)"
    start=$(date +%s)
    work="$root/.data/starter-check"
    rm -rf "$work"
    copy_checkout "$work"
    (make_starter "$work" example.com/acme/pay)
    cd "$work"
    out=$("$("$GO" env GOROOT)/bin/gofmt" -l $(git ls-files -co --exclude-standard '*.go'))
    [ -z "$out" ] || die "gofmt needed in the starter: $out"
    # Without the race detector: its findings are about code, and the
    # copy's code is the checkout's minus what the starter removed, which
    # make test ran with -race. What this run proves is that the cut and
    # the new module path leave every test green.
    echo "starter.sh: the starter's tests (go test ./..., DATABASE_URL)"
    "$GO" test -count=1 -timeout 15m ./...
    echo "starter.sh: the starter is green ($(($(date +%s) - start)) s); it was made in $work"
    ;;
  -*) usage ;;
  *)
    module=$1
    [ $# -le 2 ] || usage
    [[ "$module" =~ ^[a-z0-9][-a-z0-9.]*\.[a-z]+(/[A-Za-z0-9._~-]+)+$ ]] ||
      die "\"$module\" is not a module path like example.com/acme/pay (a domain, then a path)"
    start=$(date +%s)
    if [ $# -eq 2 ]; then
      dir=$2
      copy_checkout "$dir"
      dir=$(cd "$dir" && pwd)
    else
      dir=$root
      [ -z "$(git -C "$root" status --porcelain)" ] ||
        die "the checkout has uncommitted changes: commit or stash them first, or name a new folder (DIR=...)"
    fi
    make_starter "$dir" "$module"
    echo "starter.sh: done in $(($(date +%s) - start)) s; next: make test in $dir, then read docs/FORKING.md"
    ;;
esac
