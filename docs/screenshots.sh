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
# A fresh home: no saved layout, no config, an empty history.
env -i PATH="$PATH" DISPLAY=:97 HOME="$scratch" XDG_RUNTIME_DIR="$scratch/run" "$app" & APP=$!
sleep 6
WID=$(DISPLAY=:97 xdotool search --name '^stallscope' | head -1)
click() { DISPLAY=:97 xdotool mousemove --window "$WID" "$1" "$2" click 1; sleep "${3:-1}"; }
shot() { DISPLAY=:97 import -window "$WID" "$out/$1.png"; }
click 130 44 1        # the Source picker
click 70 71 1         # "all failure stories"
click 962 44 9        # Run, then let the stories play out
shot live
click 255 121 2       # Compact lanes: the overview over every story's lanes
shot overview
click 255 121 2       # back to plotted lanes
click 80 850 2        # the header of silent-stall #1: its detail panel opens
shot detail
DISPLAY=:97 xdotool windowfocus "$WID" key Escape; sleep 1   # closed again
click 186 12 2        # History
shot history
click 230 43 1        # Filter runs: the silent stall's run
DISPLAY=:97 xdotool windowfocus "$WID" type "silent-stall"; sleep 1
click 1086 91 3       # its Open button: it opens paused at its end
DISPLAY=:97 xdotool windowfocus "$WID" key Escape Home space; sleep 1.3
DISPLAY=:97 xdotool key space; sleep 1
shot replay           # played 1.3 s from the start: the stall, not yet retried
click 255 12 1        # Tunables
click 440 133 1       # the idle timeout's field: a bad edit shows its message
DISPLAY=:97 xdotool windowfocus "$WID" type "x"; sleep 1
shot tunables
DISPLAY=:97 xdotool key BackSpace; sleep 1
click 327 12 1        # Budget
shot budget
# The 800x600 layout: a fresh start in a small window, its first run
# started from the empty Live view.
kill $APP; sleep 1
rm -rf "$scratch/small" && mkdir -p "$scratch/small/run" && chmod 700 "$scratch/small/run"
env -i PATH="$PATH" DISPLAY=:97 HOME="$scratch/small" XDG_RUNTIME_DIR="$scratch/small/run" "$app" & APP=$!
sleep 6
WID=$(DISPLAY=:97 xdotool search --name '^stallscope' | head -1)
DISPLAY=:97 xdotool windowsize "$WID" 800 600; sleep 2
click 100 320 7       # "First run: silent-stall, 4 calls"
DISPLAY=:97 xdotool mousemove --window "$WID" 790 590; sleep 1
shot small-window
