# pareto.gp: total throughput per GPU against interactivity, one line per
# configuration, each point labelled with its concurrency.
# Data (data, default pareto_data.csv): one block per configuration, its
# first line the configuration's name; columns: interactivity (tok/s/user),
# total tok/s/GPU, concurrency, output tok/s/GPU.
# Variables: n (blocks), pct (percentile), logx, logy, mixed (0/1).
# Concurrency labels: even lines to the right of their points, odd lines to
# the left, alternately above and below, so that near points stay legible.
if (!exists("data")) data = 'pareto_data.csv'
if (!exists("pct")) pct = 90
if (!exists("logx")) logx = 0
if (!exists("logy")) logy = 0
if (!exists("mixed")) mixed = 0
load 'common.gp'
set title sprintf("Total throughput per GPU vs P%d interactivity\ntotal = (input tokens incl. cached + output tokens) / s / GPU, over all GPUs of the deployment", pct) font f_title
set xlabel sprintf("P%d interactivity (tok/s per user) = 1 / P%d TPOT", pct, pct)
set ylabel "total throughput (tok/s per GPU)"
# a log axis: 1-2-5 tics, so that an axis of one or two decades reads well
if (logx) { set logscale x; set mxtics 10; set format x "%.0f"; set xtics add (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000) } else { set mxtics 2 }
if (logy) { set logscale y; set mytics 10; set autoscale yfix; set format y "%.0s%c" } else { set mytics 2 }
if (logx) { set autoscale xfix }
if (logy) { set offsets 0, graph 0.1, graph 0.15, graph 0.1 } else { set offsets 0, graph 0.1, graph 0.1, 0 }
if (!logy) set yrange [0:*]
if (!logx) set xrange [0:*]
set key inside right top vertical Left reverse opaque box lc rgb '#cccccc' width 1
if (mixed) set label 1 "GPU counts differ between lines (see each label)" at graph 0.01, graph 0.03 left textcolor rgb '#B00000'
plines = "for [i=0:n-1] data index i using 1:2 with linespoints lt (i+1) title columnheader(1)"
even = 'for [i=0:n-1:2] data index i using 1:2:(sprintf("c=%d", int($3))) with labels offset char 0.5,char ((i % 4 == 0) ? 0.8 : -0.8) left font f_small textcolor lt (i+1) notitle'
odd = 'for [i=1:n-1:2] data index i using 1:2:(sprintf("c=%d", int($3))) with labels offset char -0.5,char ((i % 4 == 1) ? 0.8 : -0.8) right font f_small textcolor lt (i+1) notitle'
# (an empty iteration still reads the file, so the odd labels only with n > 1)
if (n > 1) { plot @plines, @even, @odd } else { plot @plines, @even }
