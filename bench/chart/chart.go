// Package chart writes small line charts as standalone SVG 1.1 documents, for
// the cost curves of `fibril bench sweep`: no dependency, no script, one file
// a browser shows as it is.
//
// A Chart is one or more panels stacked vertically over a shared x axis (the
// sweep's variable); each panel has its own y axis, title and unit, and one or
// more series drawn as a polyline with a marker on every point. Stacked panels
// were chosen over a second y axis on the right: each curve keeps a scale of
// its own, and a reader never has to match a line to one of two axes.
//
// Invariants:
//   - Points whose x or y is NaN or ±Inf, or not positive on a log axis, are
//     left out (a failed sweep point is reported as NaN): they never reach the
//     scale, the ticks or the drawing.
//   - A panel without a drawable point still gets its axes and a "no data"
//     note; a series with one point is a marker without a line.
//   - Every text written into the document goes through escape, so a title
//     holding <, & or quotes keeps the SVG well-formed.
//   - Scale maps the axis range onto the pixel range exactly: the low end of
//     the range lands on the first pixel, the high end on the last.
package chart

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Point is one (x, y) value.
type Point struct{ X, Y float64 }

// Series is one named curve of a panel.
type Series struct {
	Name   string
	Points []Point
}

// Axis describes one axis: its title (with the unit), whether it is
// logarithmic (base 10), how tick values print, and optionally the tick
// values themselves (nil = chosen from the data).
type Axis struct {
	Title  string
	Log    bool
	Format func(float64) string // nil = FormatCount
	Ticks  []float64
}

// Panel is one plot area with its own y axis.
type Panel struct {
	Title  string
	Y      Axis
	Series []Series
}

// Chart is the whole document.
type Chart struct {
	Title  string
	Note   string // a line under the title, e.g. which points failed
	X      Axis
	Panels []Panel
}

// Layout in pixels. The width fits a README column; each panel is as tall as
// a readable plot needs.
const (
	widthPx       = 760
	panelHeightPx = 260
	marginLeftPx  = 80
	marginRightPx = 170 // room for the legend
	titleHeightPx = 56
	panelGapPx    = 58 // room for the x tick labels and the next panel's title
	bottomPx      = 50
	markerRadius  = 3.5
	// plotPadPx keeps the first and last x values off the frame, so their
	// markers are not cut in half by it.
	plotPadPx = 12
)

// palette is distinguishable for common colour blindness (Okabe-Ito).
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"}

// finite reports whether v can be placed on an axis (log: must be > 0).
func finite(v float64, log bool) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return false
	}
	return !log || v > 0
}

// drawable returns the points of s that both axes can place.
func drawable(s Series, xLog, yLog bool) []Point {
	var out []Point
	for _, p := range s.Points {
		if finite(p.X, xLog) && finite(p.Y, yLog) {
			out = append(out, p)
		}
	}
	return out
}

// Scale maps data values onto pixels along one axis.
type Scale struct {
	Min, Max      float64 // data range (for a log axis: both > 0)
	Log           bool
	PxLow, PxHigh float64 // pixel of Min and of Max (PxHigh < PxLow for a y axis)
}

// Pixel is where v lands.
func (s Scale) Pixel(v float64) float64 {
	lo, hi, x := s.Min, s.Max, v
	if s.Log {
		lo, hi, x = math.Log10(lo), math.Log10(hi), math.Log10(v)
	}
	if hi == lo {
		return (s.PxLow + s.PxHigh) / 2
	}
	return s.PxLow + (x-lo)/(hi-lo)*(s.PxHigh-s.PxLow)
}

// dataRange is the min and max of values, widened so the scale is never
// degenerate: a linear axis includes 0 (a cost curve read from zero does not
// exaggerate a small change) and a log axis spans at least one decade step.
func dataRange(values []float64, log bool) (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range values {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if len(values) == 0 {
		return 0, 0, false
	}
	if log {
		if lo == hi {
			lo, hi = lo/2, hi*2
		}
		return lo, hi, true
	}
	lo, hi = math.Min(lo, 0), math.Max(hi, 0)
	if lo == hi {
		hi = 1
	}
	return lo, hi, true
}

// LinearTicks returns about target round tick values (1, 2 or 5 times a
// power of ten apart) covering [lo, hi], and the widened range they span.
func LinearTicks(lo, hi float64, target int) (ticks []float64, tickLo, tickHi float64) {
	if hi < lo {
		lo, hi = hi, lo
	}
	if hi == lo {
		hi = lo + 1
	}
	raw := (hi - lo) / float64(max(target, 1))
	magnitude := math.Pow(10, math.Floor(math.Log10(raw)))
	step := magnitude * 10
	for _, m := range []float64{1, 2, 5, 10} {
		if m*magnitude >= raw {
			step = m * magnitude
			break
		}
	}
	tickLo = math.Floor(lo/step) * step
	tickHi = math.Ceil(hi/step) * step
	for i := 0; ; i++ {
		v := tickLo + float64(i)*step
		if v > tickHi+step/2 {
			break
		}
		// Round away the float error of the multiplication (0.30000000000000004).
		if math.Abs(v) < step*1e-9 {
			v = 0 // -0.3 + 3*0.1 is 5.5e-17, not 0
		}
		ticks = append(ticks, roundSignificant(v))
	}
	return ticks, tickLo, tickHi
}

// LogTicks returns the powers of ten covering [lo, hi] (both > 0), with the
// 2x and 5x steps between them when the range spans fewer than three decades
// (otherwise the axis would carry one or two labels only), and the widened
// range: from the decade at or below lo to the decade at or above hi.
func LogTicks(lo, hi float64) (ticks []float64, tickLo, tickHi float64) {
	if lo <= 0 || hi <= 0 {
		panic("chart: LogTicks needs a positive range")
	}
	if hi < lo {
		lo, hi = hi, lo
	}
	first := math.Floor(math.Log10(lo) + 1e-9)
	last := math.Ceil(math.Log10(hi) - 1e-9)
	if last == first {
		last++
	}
	steps := []float64{1}
	if last-first < 3 {
		steps = []float64{1, 2, 5}
	}
	for e := first; e <= last; e++ {
		for _, m := range steps {
			v := m * math.Pow(10, e)
			if v > math.Pow(10, last)*(1+1e-9) {
				break
			}
			ticks = append(ticks, roundSignificant(v))
		}
	}
	return ticks, math.Pow(10, first), math.Pow(10, last)
}

// roundSignificant drops float noise from m*10^e (2e-05 stays 2e-05).
func roundSignificant(v float64) float64 {
	s := fmt.Sprintf("%.6g", v)
	var out float64
	fmt.Sscan(s, &out)
	return out
}

// axisTicks chooses the ticks and the range of one axis for values.
func axisTicks(a Axis, values []float64) (ticks []float64, lo, hi float64, ok bool) {
	dataLo, dataHi, ok := dataRange(values, a.Log)
	if len(a.Ticks) > 0 {
		// Explicit ticks (e.g. the sweep's own x values) also bound the range.
		for _, t := range a.Ticks {
			if finite(t, a.Log) {
				ticks = append(ticks, t)
			}
		}
	}
	if len(ticks) > 0 {
		lo, hi = math.Inf(1), math.Inf(-1)
		for _, t := range ticks {
			lo, hi = math.Min(lo, t), math.Max(hi, t)
		}
		if ok {
			lo, hi = math.Min(lo, dataLo), math.Max(hi, dataHi)
		}
		if lo == hi {
			if a.Log {
				lo, hi = lo/2, hi*2
			} else {
				lo, hi = lo-1, hi+1
			}
		}
		return ticks, lo, hi, true
	}
	if !ok {
		return nil, 0, 0, false
	}
	if a.Log {
		ticks, lo, hi = LogTicks(dataLo, dataHi)
	} else {
		ticks, lo, hi = LinearTicks(dataLo, dataHi, 5)
	}
	return ticks, lo, hi, true
}

// escape makes s safe as SVG text content and as an attribute value.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&quot;")
		case '\'':
			b.WriteString("&apos;")
		default:
			// XML 1.0 refuses most control characters even escaped.
			if r < 0x20 && r != '\t' && r != '\n' && r != '\r' {
				continue
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}

// HeightPx is the document height for a chart of panels panels.
func HeightPx(panels int) int {
	panels = max(panels, 1)
	return titleHeightPx + panels*panelHeightPx + (panels-1)*panelGapPx + bottomPx
}

// Write renders c as an SVG document.
func Write(w io.Writer, c Chart) error {
	var b strings.Builder
	panels := c.Panels
	if len(panels) == 0 {
		panels = []Panel{{}}
	}
	heightPx := HeightPx(len(panels))
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		widthPx, heightPx, widthPx, heightPx)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", widthPx, heightPx)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", marginLeftPx, escape(c.Title))
	if c.Note != "" {
		fmt.Fprintf(&b, `<text x="%d" y="42" fill="#555555">%s</text>`+"\n", marginLeftPx, escape(c.Note))
	}
	// The x range is shared, so it comes from every panel's points.
	var xs []float64
	for _, p := range panels {
		for _, s := range p.Series {
			for _, pt := range drawable(s, c.X.Log, p.Y.Log) {
				xs = append(xs, pt.X)
			}
		}
	}
	xTicks, xLo, xHi, xOK := axisTicks(c.X, xs)
	x := Scale{Min: xLo, Max: xHi, Log: c.X.Log, PxLow: marginLeftPx + plotPadPx, PxHigh: widthPx - marginRightPx - plotPadPx}
	for i, p := range panels {
		top := float64(titleHeightPx + i*(panelHeightPx+panelGapPx))
		writePanel(&b, c.X, x, xTicks, xOK, p, top)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writePanel draws one panel whose plot area starts at pixel row top.
func writePanel(b *strings.Builder, xAxis Axis, x Scale, xTicks []float64, xOK bool, p Panel, top float64) {
	bottom := top + panelHeightPx - 24 // the panel title takes the first rows
	plotTop := top + 24
	fmt.Fprintf(b, `<text x="%d" y="%.1f" font-size="13" font-weight="bold">%s</text>`+"\n", marginLeftPx, top+14, escape(p.Title))
	var ys []float64
	for _, s := range p.Series {
		for _, pt := range drawable(s, xAxis.Log, p.Y.Log) {
			ys = append(ys, pt.Y)
		}
	}
	yTicks, yLo, yHi, yOK := axisTicks(p.Y, ys)
	y := Scale{Min: yLo, Max: yHi, Log: p.Y.Log, PxLow: bottom, PxHigh: plotTop}
	left, right := x.PxLow-plotPadPx, x.PxHigh+plotPadPx // the frame
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888888"/>`+"\n",
		left, plotTop, right-left, bottom-plotTop)
	yFormat := formatOr(p.Y.Format)
	if yOK {
		for _, t := range yTicks {
			py := y.Pixel(t)
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", left, py, right, py)
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, py, escape(yFormat(t)))
		}
	}
	xFormat := formatOr(xAxis.Format)
	if xOK {
		for _, t := range xTicks {
			px := x.Pixel(t)
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", px, plotTop, px, bottom)
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px, bottom+16, escape(xFormat(t)))
		}
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333333">%s</text>`+"\n", (left+right)/2, bottom+34, escape(xAxis.Title))
	fmt.Fprintf(b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle" fill="#333333">%s</text>`+"\n",
		(plotTop+bottom)/2, escape(p.Y.Title))
	if !xOK || !yOK {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#999999">no data</text>`+"\n", (left+right)/2, (plotTop+bottom)/2)
		return
	}
	for i, s := range p.Series {
		colour := palette[i%len(palette)]
		pts := drawable(s, xAxis.Log, p.Y.Log)
		fmt.Fprintf(b, `<g class="series" data-name="%s">`+"\n", escape(s.Name))
		if len(pts) > 1 {
			var coords []string
			for _, pt := range pts {
				coords = append(coords, fmt.Sprintf("%.1f,%.1f", x.Pixel(pt.X), y.Pixel(pt.Y)))
			}
			fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colour, strings.Join(coords, " "))
		}
		for _, pt := range pts {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"><title>%s: %s</title></circle>`+"\n",
				x.Pixel(pt.X), y.Pixel(pt.Y), markerRadius, colour, escape(xFormat(pt.X)), escape(yFormat(pt.Y)))
		}
		b.WriteString("</g>\n")
		if len(p.Series) > 1 {
			ly := plotTop + 10 + float64(i)*18
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", right+12, ly, right+32, ly, colour)
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"/>`+"\n", right+22, ly, markerRadius, colour)
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" dominant-baseline="middle">%s</text>`+"\n", right+38, ly, escape(s.Name))
		}
	}
}

func formatOr(f func(float64) string) func(float64) string {
	if f == nil {
		return FormatCount
	}
	return f
}
