#!/bin/sh
# layers.sh: the include rule. Every #include "..." of a source file must
# point to its own layer or one below it (ARCHITECTURE.md):
#
#   replay/cli/     the command fronts and main: may include anything
#   replay/         the replayer        -> replay/ (not cli), engine/, traces/
#   plots/          charts and reports  -> plots/, traces/base/
#   kernels/        CUDA decode layer   -> kernels/, traces/base/
#   engine/         the engine, its protocol, server and clocks
#                                       -> engine/, traces/
#   engine/clock/   the clocks          -> engine/clock/, traces/base/
#   traces/         the trace model     -> traces/
#   traces/base/    the ground floor    -> traces/base/
#
# Prints one line per include that points up a layer and the closing line
# "N passed, N failed" (N = files checked); exits 1 on any violation.
cd "$(dirname "$0")/.." || exit 2

allowed() { # allowed FILE: the include prefixes FILE may use (space-separated)
    case $1 in
    replay/cli/*) echo "replay/ engine/ traces/ plots/ kernels/" ;;
    replay/*) echo "replay/ engine/ traces/" ;;
    plots/*) echo "plots/ traces/base/" ;;
    kernels/*) echo "kernels/ traces/base/" ;;
    engine/clock/*) echo "engine/clock/ traces/base/" ;;
    engine/*) echo "engine/ traces/" ;;
    traces/base/*) echo "traces/base/" ;;
    traces/*) echo "traces/" ;;
    *) echo "" ;;
    esac
}

pass=0; fail=0
files=$(find traces engine kernels plots replay -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)
for f in $files; do
    ok=1
    prefixes=$(allowed "$f")
    for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
        hit=0
        for p in $prefixes; do
            case $inc in "$p"*) hit=1 ;; esac
        done
        # replay/ below cli may not reach up into replay/cli/.
        case $f in replay/cli/*) ;; replay/*) case $inc in replay/cli/*) hit=0 ;; esac ;; esac
        if [ $hit -eq 0 ]; then
            echo "$f: includes \"$inc\", which is above its layer"
            ok=0
        fi
    done
    if [ $ok -eq 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
