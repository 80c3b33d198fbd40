# timeline.gp: a run over time: live sessions and running calls, waiting
# calls, KV cache use, prefix hit rate, tokens/s (six panels).
# Data (data, default timeline_data.csv): one block per configuration, its
# first line the configuration's name; columns: t_s, live_sessions,
# running, waiting, kv_used_pct, prefix_hit_pct, tokens_per_s,
# output_tokens_per_s.
# Variables: n (blocks), tunit (1: seconds, 60: minutes), tmax (s), ylive, yrun,
# ywait, ytok (axis tops), sub (the run shown), warn (a warning in red, or
# '').
if (!exists("data")) data = 'timeline_data.csv'
if (!exists("tunit")) tunit = 1
if (!exists("sub")) sub = ''
if (!exists("warn")) warn = ''
if (!exists("ylive")) ylive = 1
if (!exists("tmax")) tmax = 0
if (!exists("yrun")) yrun = 1
if (!exists("ywait")) ywait = 1
if (!exists("ytok")) ytok = 1
load 'common.gp'
tl = (tunit == 60) ? "time (min)" : "time (s)"
top = 1 - ((warn ne '') ? 5.8 : 4.2) * chy
bot = ((n < 3) ? n : 3) * chy * 1.4 + 4.5 * chy
set multiplot layout 2,3 title sprintf("Timeline of the run at %s (one value per second)", sub) font f_title margins 10 * chx,0.985,bot,top spacing 11 * chx,5.0 * chy
if (warn ne '') set label 99 warn at screen 0.5, 1 - 2.7 * chy center textcolor rgb '#B00000' font f_warn
set xlabel tl
# about one x tic per 90 pixels of a panel, at a round step
if (exists("tmax") && tmax > 0) {
    raw = tmax / tunit / ((W / 3 / 90 > 2) ? W / 3 / 90 : 2)
    mag = 10 ** floor(log10(raw))
    r = raw / mag
    tstep = ((r <= 1) ? 1 : (r <= 2) ? 2 : (r <= 5) ? 5 : 10) * mag
    set xtics tstep
    set xrange [0:tmax / tunit]
}
set mxtics 2
set mytics 2
set key at screen 0.5, 0.02 center bottom vertical maxrows 3 width 2 Left reverse

set title "Live sessions"
set ylabel "sessions"
set yrange [0:ylive]
plot for [i=0:n-1] data index i using ($1/tunit):2 with steps lt (i+1) lw 1.5 title columnheader(1)

unset label 99
set key off
set title "Running calls"
set yrange [0:yrun]
set ylabel "calls"
plot for [i=0:n-1] data index i using ($1/tunit):3 with steps lt (i+1) lw 1.5 notitle

set title "Calls waiting for admission"
set yrange [0:ywait]
set ylabel "calls"
plot for [i=0:n-1] data index i using ($1/tunit):4 with steps lt (i+1) lw 1.5 notitle

set title "KV cache in use"
set ylabel "% of blocks"
set yrange [0:105]
plot for [i=0:n-1] data index i using ($1/tunit):5 with lines lt (i+1) lw 1.5 notitle

set title "Prefix-cache hit rate"
set ylabel "% of prompt tokens"
set yrange [0:105]
plot for [i=0:n-1] data index i using ($1/tunit):6 with lines lt (i+1) lw 1 notitle

set title "Tokens/s: total (solid), output (dashed)"
set ylabel "tok/s, whole deployment"
set yrange [0:ytok]
plot for [i=0:n-1] data index i using ($1/tunit):7 with lines lt (i+1) lw 1 notitle, \
     for [i=0:n-1] data index i using ($1/tunit):8 with lines lt (i+1) lw 1 dt 2 notitle
unset multiplot
