# timeline.gp: a run over time: live sessions and running calls, waiting
# calls, KV cache use, prefix hit rate, tokens/s (six panels).
# Data (data, default timeline_data.csv): one block per configuration, its
# first line the configuration's name; columns: t_s, live_sessions,
# running, waiting, kv_used_pct, prefix_hit_pct, tokens_per_s,
# output_tokens_per_s.
# Variables: n (blocks), l2..l8 (the blocks with values in columns 2..8),
# tunit (1: seconds, 60: minutes), tmax (s), logtok (log tokens/s axis), ylive, yrun,
# ywait, ytok (axis tops), binsec (seconds per point), hitover (seconds with a hit rate over 100 %), sub (the run shown), warn (a warning in red, or
# '').
if (!exists("data")) data = 'timeline_data.csv'
if (!exists("tunit")) tunit = 1
if (!exists("sub")) sub = ''
if (!exists("warn")) warn = ''
if (!exists("ylive")) ylive = 1
if (!exists("tmax")) tmax = 0
if (!exists("logtok")) logtok = 0
if (!exists("hitover")) hitover = 0
if (!exists("binsec")) binsec = 1
if (!exists("yrun")) yrun = 1
if (!exists("ywait")) ywait = 1
if (!exists("ytok")) ytok = 1
load 'common.gp'
# the blocks with values in each column ('0 1 ...'); all by default
all = ''
do for [i=0:n-1] { all = all . sprintf('%d ', i) }
if (!exists("l2")) l2 = all
if (!exists("l3")) l3 = all
if (!exists("l4")) l4 = all
if (!exists("l5")) l5 = all
if (!exists("l6")) l6 = all
if (!exists("l7")) l7 = all
if (!exists("l8")) l8 = all
# an empty panel (no values in that column)
nodata = "set label 98 'no data' at graph 0.5, graph 0.5 center; plot NaN notitle; unset label 98"
tl = (tunit == 60) ? "time (min)" : "time (s)"
top = 1 - ((warn ne '') ? 5.8 : 4.2) * chy
bot = ((n < 3) ? n : 3) * chy * 1.4 + 4.5 * chy
set multiplot layout 2,3 title sprintf("Timeline of the run at %s (%s)", sub, (binsec > 1) ? sprintf("means over %d s", binsec) : "one value per second") font f_title margins 10 * chx,0.985,bot,top spacing 11 * chx,6.0 * chy
if (warn ne '') set label 99 warn at screen 0.5, 1 - 2.7 * chy center textcolor rgb '#B00000' font f_warn
set xlabel tl
# about one x tic per 90 pixels of a panel, at a round step
if (tmax > 0) {
    set xtics nice_step(tmax / tunit, W / 3 / 90)
    set xrange [0:tmax / tunit]
}
set mxtics 2
set mytics 2
set key at screen 0.5, 0.02 center bottom vertical maxrows 3 width 2 Left reverse

set title "Live sessions"
set ylabel "sessions"
set yrange [0:ylive]
if (strlen(l2) > 0) {
    plot for [w in l2] data index int(w) using ($1/tunit):2 with steps lt (int(w)+1) lw 1.5 title columnheader(1)
} else { @nodata }

unset label 99
set key off
set title "Running calls"
set yrange [0:yrun]
set ylabel "calls"
if (strlen(l3) > 0) {
    plot for [w in l3] data index int(w) using ($1/tunit):3 with steps lt (int(w)+1) lw 1.5 notitle
} else { @nodata }

set title "Calls waiting for admission"
set yrange [0:ywait]
set ylabel "calls"
if (strlen(l4) > 0) {
    plot for [w in l4] data index int(w) using ($1/tunit):4 with steps lt (int(w)+1) lw 1.5 notitle
} else { @nodata }

set title "KV cache in use"
set ylabel "% of blocks"
set yrange [0:105]
if (strlen(l5) > 0) {
    plot for [w in l5] data index int(w) using ($1/tunit):5 with lines lt (int(w)+1) lw 1.5 notitle
} else { @nodata }

set title "Prefix-cache hit rate (seconds with prompts)"
set ylabel "% of prompt tokens"
set yrange [0:105]
if (hitover > 0) { set label 97 sprintf("%d point%s above 100 %% (off scale)", hitover, (hitover > 1) ? "s" : "") at graph 0.98, graph 0.06 right textcolor rgb '#B00000' font f_small }
if (strlen(l6) > 0) {
    plot for [w in l6] data index int(w) using ($1/tunit):6 with points lt (int(w)+1) pt 7 ps 0.35 notitle
} else { @nodata }

unset label 97
set title "Tokens/s, 10 s means (dashed: output)"
if (logtok) {
    set ylabel "tok/s, whole deployment (log)"
    set logscale y
    set format y "%.0s%c"
    set yrange [1:ytok * 2]
    set mytics 10
} else {
    set ylabel "tok/s, whole deployment"
    set yrange [0:ytok]
}
if (strlen(l7) > 0 && strlen(l8) > 0) {
    plot for [w in l7] data index int(w) using ($1/tunit):7 with lines lt (int(w)+1) lw 1 notitle, \
         for [w in l8] data index int(w) using ($1/tunit):8 with lines lt (int(w)+1) lw 1 dt 2 notitle
} else { if (strlen(l7) > 0) {
    plot for [w in l7] data index int(w) using ($1/tunit):7 with lines lt (int(w)+1) lw 1 notitle
} else { @nodata } }
unset multiplot
