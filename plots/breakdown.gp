# breakdown.gp: where a decode step's time goes: per-layer kernel time of
# each decode path and layer kind, stacked by kernel.
# Data (data, default breakdown_data.csv): header "layer / path", one
# column per kernel, total_us; one row per layer kind and path; values in
# microseconds per layer.
# Variables: nk (kernels), nr (rows), batch, ymax (axis top, us).
if (!exists("data")) data = 'breakdown_data.csv'
if (!exists("batch")) batch = 1
load 'common.gp'
set title sprintf("Where a decode step's time goes: per-layer kernel time at batch %d, standard vs latency-specialized path", batch) font f_title
set ylabel "time per layer (µs)"
set xlabel "layer kind / decode path"
set style data histograms
set style histogram rowstacked
set style fill solid 0.9 border rgb '#ffffff'
set boxwidth 0.6 relative
set yrange [0:ymax]
set mytics 2
set grid noxtics nomxtics ytics mytics
set key outside right top vertical Left reverse maxrows 24 font f_small
set xtics nomirror scale 0
# every plot below reads the header line as titles, so rows count from 0
set key autotitle columnheader
# kernel colours: the common palette, then lighter tints for the rest
do for [k=10:48] { set linetype k lc rgb hsv2rgb((k * 0.137) - floor(k * 0.137), 0.45, 0.85) }
set linetype cycle 48
plot for [i=2:nk+1] data using i:xtic(1) title columnheader(i) lt (i-1), \
     data using 0:(column(nk+2)):(sprintf("%.1f µs", column(nk+2))) with labels offset char 0,char 0.8 notitle
