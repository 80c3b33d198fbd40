# fidelity.gp: the engine's predictions beside the published calibration
# point(s).
# Data (data, default fidelity_data.csv): header; columns: x, setup label,
# predicted tok/s, published tok/s (empty where none), predicted/published,
# 1 for the specialized path.
# Variables: n (rows), logy, npub (rows with a published figure).
if (!exists("data")) data = 'fidelity_data.csv'
if (!exists("logy")) logy = 0
load 'common.gp'
set title "Fidelity: engine predictions beside the published calibration point\naggregate decode throughput = all requests' tokens after their first / decode time" font f_title
set ylabel "aggregate decode throughput (tok/s)"
set style fill solid 0.85 border rgb '#333333'
set boxwidth 0.36
set xrange [-0.6:n-0.4]
if (logy) { set logscale y; set yrange [*:*]; set mytics 10 } else { set yrange [0:*]; set mytics 2 }
set offsets 0, 0, graph 0.12, 0
set xtics nomirror scale 0 font f_small
set grid noxtics nomxtics ytics mytics
set bmargin 6
set key inside left top vertical Left reverse opaque box lc rgb '#cccccc'
px(c) = valid(4) ? column(c) - 0.19 : column(c)
plot data using (px(1)):($6 == 0 ? $3 : NaN):xtic(lines(strcol(2))) skip 1 with boxes lc rgb '#0072B2' title 'predicted, standard path', \
     data using (px(1)):($6 == 1 ? $3 : NaN) skip 1 with boxes lc rgb '#D55E00' title 'predicted, latency-specialized path', \
     data using ($1+0.19):4 skip 1 with boxes fs pattern 4 border rgb '#000000' lc rgb '#000000' title 'published (calibration); ratio = predicted / published', \
     data using (px(1)):3:(sprintf("%.0f", $3)) skip 1 with labels offset char 0,char 0.7 font f_tiny notitle, \
     data using ($1+0.19):4:(sprintf("%.0f\nratio %.2f", $4, $5)) skip 1 with labels offset char 0,char 1.3 font f_tiny notitle
