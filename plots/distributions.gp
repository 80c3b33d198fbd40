# distributions.gp: cumulative distributions of TTFT, TPOT and per-request
# interactivity, one curve per configuration (three panels).
# Data (data, default cdf_data.csv): one block per configuration, its first
# line the configuration's name; columns: fraction, TTFT (ms), TPOT (ms),
# interactivity (tok/s/user) at that quantile.
# Variables: n (blocks), pct (percentile marked), logx1..logx3 (log x per
# panel), xmax1..xmax3 (largest value per panel), ltpot (the blocks that have TPOT values, e.g. '0 2'), sub (what run is shown), warn (a warning shown in red, or '').
if (!exists("data")) data = 'cdf_data.csv'
if (!exists("pct")) pct = 90
if (!exists("logx1")) logx1 = 0
if (!exists("logx2")) logx2 = 0
if (!exists("logx3")) logx3 = 0
if (!exists("sub")) sub = ''
if (!exists("warn")) warn = ''
if (!exists("xmax1")) xmax1 = 0
if (!exists("xmax2")) xmax2 = 0
if (!exists("xmax3")) xmax3 = 0
if (!exists("ltpot")) { ltpot = ''; do for [i=0:n-1] { ltpot = ltpot . sprintf('%d ', i) } }
load 'common.gp'
q = pct / 100.0
top = 1 - ((warn ne '') ? 5.8 : 4.2) * chy
bot = ((n < 3) ? n : 3) * chy * 1.4 + 4.5 * chy
set multiplot layout 1,3 title sprintf("Per-request distributions at %s (measured calls; warmup, errors and cancelled excluded)", sub) font f_title margins 9 * chx,0.985,bot,top spacing 10 * chx,0.1
if (warn ne '') set label 99 warn at screen 0.5, 1 - 2.7 * chy center textcolor rgb '#B00000' font f_warn
set ylabel "fraction of calls"
set yrange [0:1]
set ytics 0.1
set mytics 2
set key at screen 0.5, 0.02 center bottom vertical maxrows 3 width 2 Left reverse
set arrow 1 from graph 0, first q to graph 1, first q nohead dt 2 lc rgb '#555555' lw 1 front
set label 2 sprintf("P%d", pct) at graph 0.01, first q offset 0,0.6 textcolor rgb '#555555'

set title "TTFT"
set xlabel "time to first token (ms)"
if (logx1) { set logscale x; set mxtics 10 } else { unset logscale x; set mxtics 2; set xrange [0:*]; if (xmax1 > 0) { set xtics nice_step(xmax1, W / 3 / 75) } }
plot for [i=0:n-1] data index i using 2:1 with lines lt (i+1) lw 2 title columnheader(1)

unset label 99
set key off
set title "TPOT"
set xlabel "time per output token (ms)"
set xrange [*:*]
set xtics autofreq
if (logx2) { set logscale x; set mxtics 10 } else { unset logscale x; set mxtics 2; set xrange [0:*]; if (xmax2 > 0) { set xtics nice_step(xmax2, W / 3 / 75) } }
if (strlen(ltpot) > 0) {
    plot for [w in ltpot] data index int(w) using 3:1 with lines lt (int(w)+1) lw 2 notitle
} else {
    set xrange [0:1]
    set label 3 "no call had more than one output token" at graph 0.5, graph 0.5 center
    plot NaN notitle
    unset label 3
}

set title "Per-request interactivity"
set xlabel "interactivity (tok/s per user) = 1 / TPOT"
set arrow 1 from graph 0, first (1 - q) to graph 1, first (1 - q) nohead dt 2 lc rgb '#555555' lw 1 front
set label 2 sprintf("P%d interactivity = 1 / P%d TPOT", pct, pct) at graph 0.99, first (1 - q) right offset 0,0.6 textcolor rgb '#555555'
set xrange [*:*]
set xtics autofreq
if (logx3) { set logscale x; set mxtics 10 } else { unset logscale x; set mxtics 2; set xrange [0:*]; if (xmax3 > 0) { set xtics nice_step(xmax3, W / 3 / 75) } }
if (strlen(ltpot) > 0) {
    plot for [w in ltpot] data index int(w) using 4:1 with lines lt (int(w)+1) lw 2 notitle
} else {
    set xrange [0:1]
    plot NaN notitle
}
unset multiplot
