# fidelity.gp: the engine's predictions beside the published calibration
# point(s).
# Data (data, default fidelity_data.csv): header; columns: x position, tick
# label (lines split by '|'), predicted tok/s, published tok/s (empty where
# none), predicted/published, 1 for the specialized path.
# Variables: n (rows), xmax (last x), logy, npub (rows with a published
# figure), sub (GPU count and layout when the same for all rows, or ''),
# gnames, gx (setup names and their centres, space separated), ylab and
# pubtitle (the y label and the published bars' key, when not the default).
if (!exists("data")) data = 'fidelity_data.csv'
if (!exists("logy")) logy = 0
if (!exists("xmax")) xmax = n - 1
if (!exists("sub")) sub = ''
if (!exists("gnames")) gnames = ''
if (!exists("gx")) gx = ''
if (!exists("ylab")) ylab = "aggregate decode throughput (tok/s)"
if (!exists("pubtitle")) pubtitle = 'published (calibration); ratio = predicted / published'
load 'common.gp'
set title sprintf("Fidelity: engine predictions beside the published calibration point%s\naggregate decode throughput = all requests' tokens after their first / decode time", (sub ne '') ? ' ('.sub.')' : '') font f_title
set ylabel ylab
set style fill solid 0.85 border rgb '#333333'
set boxwidth 0.5
set xrange [-0.7:xmax + 0.7]
if (logy) { set logscale y; set yrange [*:*]; set mytics 10 } else { set yrange [0:*]; set mytics 2 }
set offsets 0, 0, graph 0.12, 0
set xtics nomirror scale 0 font f_tiny
set grid noxtics nomxtics ytics mytics
set bmargin 8
set key inside left top vertical Left reverse opaque box lc rgb '#cccccc'
# setup names under their groups of bars
do for [gi=1:words(gnames)] {
    set label (100 + gi) lines(word(gnames, gi)) at first real(word(gx, gi)), graph 0 center offset 0, char -3.6 font f_small textcolor rgb '#333333'
}
# predicted bars move left of centre where a published bar stands beside
px(c) = valid(4) ? column(c) - 0.3 : column(c)
plot data using (px(1)):($6 == 0 ? $3 : NaN):xtic(lines(strcol(2))) skip 1 with boxes lc rgb '#0072B2' title 'predicted, standard path', \
     data using (px(1)):($6 == 1 ? $3 : NaN) skip 1 with boxes lc rgb '#D55E00' title 'predicted, latency-specialized path', \
     data using ($1+0.3):4 skip 1 with boxes fs pattern 4 border rgb '#000000' lc rgb '#000000' title pubtitle, \
     data using (px(1)):3:(sprintf("%.0f", $3)) skip 1 with labels offset char 0,char 0.7 font f_tiny notitle, \
     data using ($1+0.3):4:(sprintf("%.0f", $4)) skip 1 with labels offset char 0,char 0.7 font f_tiny notitle, \
     data using 1:(($3 > $4) ? $3 : $4):(sprintf("ratio %.2f", $5)) skip 1 with labels offset char 0,char 1.9 font f_tiny textcolor rgb '#000000' notitle
