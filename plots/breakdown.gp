# breakdown.gp: where a decode step's time goes: per-layer kernel time of
# each decode path and layer kind, stacked by kernel.
# Data (data, default breakdown_data.csv): header "layer / path", one
# column per kernel, total_us; one row per layer kind and path (label lines
# split by '|'), an empty row between layer kinds; microseconds per layer.
# Variables: nk (kernels), nr (rows), batch, ymax (axis top, us), colors
# (one colour per kernel, space separated).
if (!exists("data")) data = 'breakdown_data.csv'
if (!exists("batch")) batch = 1
if (!exists("colors")) colors = ''
load 'common.gp'
set title sprintf("Where a decode step's time goes: time per layer at batch %d, by kernel\nstd = standard path, spec = latency-specialized path", batch) font f_title
set ylabel "time per layer (µs)"
set style data histograms
set style histogram rowstacked
set style fill solid 0.95 border rgb '#ffffff'
set boxwidth 0.7 relative
set yrange [0:ymax]
set mytics 2
set grid noxtics nomxtics ytics mytics
set key outside right top vertical Left reverse maxrows ((nk + 1) / 2 > 12 ? (nk + 1) / 2 : 12) font f_tiny samplen 1.5 spacing 1.0
set xtics nomirror scale 0
set bmargin 4
# every plot below reads the header line as titles, so rows count from 0
set key autotitle columnheader
kc(i) = (words(colors) >= i) ? word(colors, i) : '#888888'
plot for [i=2:nk+1] data using i:xtic(lines(strcol(1))) title columnheader(i) lc rgb kc(i-1), \
     data using 0:(column(nk+2)):(sprintf("%.1f µs", column(nk+2))) with labels offset char 0,char 0.8 font f_small notitle
