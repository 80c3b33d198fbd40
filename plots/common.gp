# common.gp: terminal, fonts, colours and grid shared by every chart.
# Loaded by each chart script. Set by the caller (gnuplot -e):
#   fmt  'png' (pngcairo) or 'svg';  out  the image file;  W, H  pixels.
if (!exists("fmt")) fmt = 'png'
if (!exists("W")) W = 1200
if (!exists("H")) H = 750
if (!exists("out")) out = 'chart.' . fmt
# base font size (points): 11 at 1200x750, scaled with the smaller side
fs = int(11.0 * ((W / 1200.0 < H / 750.0) ? W / 1200.0 : H / 750.0) + 0.5)
fs = (fs < 8) ? 8 : ((fs > 16) ? 16 : fs)
# one text line and one character as fractions of the image height/width
# (for multiplot margins that hold their labels at any size)
chy = fs * 1.5 / H
chx = fs * 0.8 / W
# a round tic step (1, 2 or 5 x 10^k) giving about n tics over range r
nice_step(r, n) = (ns_raw = (r * 1.0) / ((n > 2) ? n : 2), ns_mag = 10 ** floor(log10(ns_raw)), ns_r = ns_raw / ns_mag, ((ns_r <= 1) ? 1 : (ns_r <= 2) ? 2 : (ns_r <= 5) ? 5 : 10) * ns_mag)
# '|' in a data string: a line break (tick labels)
lines(s) = (li = strstrt(s, '|'), li ? s[1:li-1] . "\n" . lines(s[li+1:]) : s)
if (fmt eq 'svg') {
    set terminal svg size W,H dynamic noenhanced font sprintf('DejaVu Sans,%d', fs + 1) background rgb 'white'
} else {
    set terminal pngcairo size W,H noenhanced font sprintf('DejaVu Sans,%d', fs) background rgb 'white'
}
set output out
set encoding utf8
set datafile separator comma
set border 3 lw 1 lc rgb '#444444'
set tics nomirror out scale 0.6 textcolor rgb '#222222'
set grid xtics ytics mxtics mytics lw 1 lc rgb '#e4e4e4', lw 0.5 lc rgb '#f2f2f2'
set key noopaque samplen 2.5 spacing 1.2
# A colour-blind-safe qualitative palette (Okabe and Ito), then greys.
set linetype 1 lc rgb '#0072B2' lw 2 pt 7 ps 1.1
set linetype 2 lc rgb '#D55E00' lw 2 pt 5 ps 1.1
set linetype 3 lc rgb '#009E73' lw 2 pt 9 ps 1.3
set linetype 4 lc rgb '#CC79A7' lw 2 pt 11 ps 1.3
set linetype 5 lc rgb '#E69F00' lw 2 pt 13 ps 1.2
set linetype 6 lc rgb '#56B4E9' lw 2 pt 15 ps 1.2
set linetype 7 lc rgb '#000000' lw 2 pt 7 ps 1.1
set linetype 8 lc rgb '#F0E442' lw 2 pt 5 ps 1.1
set linetype 9 lc rgb '#7f7f7f' lw 2 pt 9 ps 1.3
set linetype cycle 9
# Font specifications relative to the base size fs.
f_title = sprintf(',%d', fs + 2)
f_warn = sprintf(',%d', fs + 1)
f_small = sprintf(',%d', fs - 1)
f_tiny = sprintf(',%d', fs - 2)
