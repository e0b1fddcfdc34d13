#!/usr/bin/env bash
# Regenerates the screenshots in docs/screenshots/ from the real app in a
# virtual display. Needs: apt-get install xvfb xauth imagemagick xdotool.
# Usage: docs/screenshots.sh [path/to/stallscope]   (default: target/debug/stallscope)
set -euo pipefail
cd "$(dirname "$0")/.."
app=${1:-target/debug/stallscope}
out=docs/screenshots
scratch=$(mktemp -d)
trap 'kill $APP $XVFB 2>/dev/null || true; rm -rf "$scratch"' EXIT
Xvfb :97 -screen 0 1600x1000x24 -nolisten tcp & XVFB=$!
sleep 1
mkdir -p "$scratch/run" && chmod 700 "$scratch/run"
# A fresh home: no saved layout, no config, an empty history. (exec, so
# that $! of `fresh … &` is the app's own pid.)
fresh() { exec env -i PATH="$PATH" DISPLAY=:97 HOME="$1" XDG_RUNTIME_DIR="$1/run" "${@:2}"; }
# Two runs of one stall to compare: the idle timer at 1 s, then at 0.4 s.
(fresh "$scratch" "$app" run --scenario silent-stall --requests 4 --concurrency 4 --seed 1 --label "idle 1 s") >/dev/null
(fresh "$scratch" "$app" run --scenario silent-stall --requests 4 --concurrency 4 --seed 1 --label "idle 0.4 s" \
  --set SSE_IDLE_TIMEOUT_S=0.4) >/dev/null
fresh "$scratch" "$app" & APP=$!
sleep 6
WID=$(DISPLAY=:97 xdotool search --name '^stallscope' | head -1)
click() { DISPLAY=:97 xdotool mousemove --window "$WID" "$1" "$2" click 1; sleep "${3:-1}"; }
key() { DISPLAY=:97 xdotool windowfocus "$WID" key "$@"; sleep 1; }
shot() { DISPLAY=:97 import -window "$WID" "$out/$1.png"; }
click 130 44 1        # the Source picker
click 70 89 1         # "all failure stories"
key F5; sleep 8       # Run, then let the stories play out
shot live
click 254 168 2       # Compact lanes: the overview over every story's lanes
click 41 309 1        # the Legend folded, so that the overview fits the header
shot overview
click 41 309 1        # the Legend open again
click 254 168 2       # back to plotted lanes
click 47 866 2        # the header of silent-stall #1: its detail panel opens
shot detail
key Escape            # closed again
click 186 12 2        # History: the batch of stories, then the two stalls
shot history
click 1154 213 3      # Open run 1 (idle 1 s): it opens paused at its end
key Escape Home space; sleep 0.3
key space
shot replay           # played 1.3 s from the start: the stall, not yet retried
click 255 12 1        # Tunables
click 375 181 1       # the idle timeout's field: a bad edit shows its message
DISPLAY=:97 xdotool windowfocus "$WID" type "x"; sleep 1
shot tunables
key BackSpace
click 327 12 1        # Budget
shot budget
click 186 12 2        # History: run 1 as A, run 2 as B, Compare
click 15 210 1
click 49 183 1
click 385 44 2
shot compare
click 93 91 3         # Show both runs' lanes: stream by stream, one axis
shot compare-lanes
# The 800x600 layout: a fresh start in a small window, its first run
# started from the empty Live view.
kill $APP; sleep 1
rm -rf "$scratch/small" && mkdir -p "$scratch/small/run" && chmod 700 "$scratch/small/run"
fresh "$scratch/small" "$app" & APP=$!
sleep 6
WID=$(DISPLAY=:97 xdotool search --name '^stallscope' | head -1)
DISPLAY=:97 xdotool windowsize "$WID" 800 600; sleep 2
click 100 358 7       # "First run: silent-stall, 4 calls"
DISPLAY=:97 xdotool mousemove --window "$WID" 790 590; sleep 1
shot small-window
