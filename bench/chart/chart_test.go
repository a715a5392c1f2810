package chart

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestLinearTicks(t *testing.T) {
	cases := []struct {
		lo, hi float64
		want   []float64
	}{
		{0, 10, []float64{0, 2, 4, 6, 8, 10}},
		{0, 97, []float64{0, 20, 40, 60, 80, 100}},
		{0, 0.3, []float64{0, 0.1, 0.2, 0.3}},
		{0, 230000, []float64{0, 50000, 100000, 150000, 200000, 250000}},
		{-3, 3, []float64{-4, -2, 0, 2, 4}},
		{-0.3, 0.2, []float64{-0.3, -0.2, -0.1, 0, 0.1, 0.2}},
	}
	for _, c := range cases {
		got, lo, hi := LinearTicks(c.lo, c.hi, 5)
		if !slices.Equal(got, c.want) {
			t.Errorf("LinearTicks(%v, %v) = %v, want %v", c.lo, c.hi, got, c.want)
		}
		if lo > c.lo || hi < c.hi {
			t.Errorf("LinearTicks(%v, %v): range [%v, %v] does not cover the data", c.lo, c.hi, lo, hi)
		}
	}
}

func TestLogTicks(t *testing.T) {
	got, lo, hi := LogTicks(1, 10000)
	if want := []float64{1, 10, 100, 1000, 10000}; !slices.Equal(got, want) {
		t.Errorf("LogTicks(1, 1e4) = %v, want %v", got, want)
	}
	if lo != 1 || hi != 10000 {
		t.Errorf("range [%v, %v], want [1, 10000]", lo, hi)
	}
	// Under three decades the 2 and 5 steps fill the axis in.
	got, lo, hi = LogTicks(3, 70)
	if want := []float64{1, 2, 5, 10, 20, 50, 100}; !slices.Equal(got, want) {
		t.Errorf("LogTicks(3, 70) = %v, want %v", got, want)
	}
	if lo != 1 || hi != 100 {
		t.Errorf("range [%v, %v], want [1, 100]", lo, hi)
	}
	// One value still gets a decade.
	got, _, _ = LogTicks(1000, 1000)
	if want := []float64{1000, 2000, 5000, 10000}; !slices.Equal(got, want) {
		t.Errorf("LogTicks(1000, 1000) = %v, want %v", got, want)
	}
	got, _, _ = LogTicks(0.002, 0.04)
	if want := []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1}; !slices.Equal(got, want) {
		t.Errorf("LogTicks(0.002, 0.04) = %v, want %v", got, want)
	}
}

func TestScalePixel(t *testing.T) {
	lin := Scale{Min: 0, Max: 100, PxLow: 80, PxHigh: 580}
	for _, c := range []struct{ v, px float64 }{{0, 80}, {100, 580}, {50, 330}, {10, 130}} {
		if got := lin.Pixel(c.v); math.Abs(got-c.px) > 1e-9 {
			t.Errorf("linear Pixel(%v) = %v, want %v", c.v, got, c.px)
		}
	}
	// A y axis runs upwards: Min at the bottom pixel.
	y := Scale{Min: 0, Max: 10, PxLow: 300, PxHigh: 100}
	if got := y.Pixel(5); got != 200 {
		t.Errorf("y Pixel(5) = %v, want 200", got)
	}
	log := Scale{Min: 1, Max: 10000, Log: true, PxLow: 0, PxHigh: 400}
	for _, c := range []struct{ v, px float64 }{{1, 0}, {10, 100}, {100, 200}, {10000, 400}} {
		if got := log.Pixel(c.v); math.Abs(got-c.px) > 1e-9 {
			t.Errorf("log Pixel(%v) = %v, want %v", c.v, got, c.px)
		}
	}
}

func TestFormat(t *testing.T) {
	counts := map[float64]string{0: "0", 1: "1", 950: "950", 1000: "1k", 2500: "2.5k", 10000: "10k",
		1e6: "1M", 10e6: "10M", 0.25: "0.25", 1.5e9: "1.5G"}
	for v, want := range counts {
		if got := FormatCount(v); got != want {
			t.Errorf("FormatCount(%v) = %q, want %q", v, got, want)
		}
	}
	sizes := map[float64]string{64: "64 B", 1024: "1 KiB", 16384: "16 KiB", 1 << 20: "1 MiB", 1536: "1.5 KiB"}
	for v, want := range sizes {
		if got := FormatBytes(v); got != want {
			t.Errorf("FormatBytes(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestEscape(t *testing.T) {
	got := escape(`a<b & "c" 'd'>` + "\x01")
	if want := "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;"; got != want {
		t.Errorf("escape = %q, want %q", got, want)
	}
}

// parseSVG checks the document is well-formed XML with an svg root in the SVG
// namespace and returns every element's name and attributes.
func parseSVG(t *testing.T, doc []byte) []xml.StartElement {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var elements []xml.StartElement
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		if se, ok := tok.(xml.StartElement); ok {
			elements = append(elements, se.Copy())
		}
	}
	if len(elements) == 0 || elements[0].Name.Local != "svg" || elements[0].Name.Space != "http://www.w3.org/2000/svg" {
		t.Fatalf("root is not an svg element in the SVG namespace: %v", elements[:min(1, len(elements))])
	}
	return elements
}

func count(elements []xml.StartElement, name string) int {
	n := 0
	for _, e := range elements {
		if e.Name.Local == name {
			n++
		}
	}
	return n
}

func render(t *testing.T, c Chart) ([]byte, []xml.StartElement) {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, c); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), parseSVG(t, buf.Bytes())
}

func TestWriteTwoPanelsLegendAndEscapedTitle(t *testing.T) {
	c := Chart{
		Title: `connections <1..1000> & "p99"`,
		X:     Axis{Title: "connections", Log: true},
		Panels: []Panel{
			{Title: "throughput", Y: Axis{Title: "msgs/s"}, Series: []Series{
				{Name: "msgs/s", Points: []Point{{1, 100}, {10, 200}, {100, 150}, {1000, 50}}},
				{Name: "pub msgs/s", Points: []Point{{1, 90}, {10, 180}}},
			}},
			{Title: "latency", Y: Axis{Title: "p99, ms", Log: true}, Series: []Series{
				{Name: "p99", Points: []Point{{1, 1}, {10, math.NaN()}, {100, math.Inf(1)}, {1000, 30}}},
			}},
		},
	}
	doc, elements := render(t, c)
	if got := count(elements, "polyline"); got != 3 {
		t.Errorf("%d polylines, want 3", got)
	}
	// 4 + 2 + 2 data markers (NaN and Inf left out) + 2 legend markers.
	if got := count(elements, "circle"); got != 10 {
		t.Errorf("%d circles, want 10", got)
	}
	if !strings.Contains(string(doc), "connections &lt;1..1000&gt; &amp; &quot;p99&quot;") {
		t.Error("title not escaped")
	}
	for _, label := range []string{">1k<", ">100<", ">10<"} {
		if !strings.Contains(string(doc), label) {
			t.Errorf("no tick label %s", label)
		}
	}
	if !strings.Contains(string(doc), ">pub msgs/s<") {
		t.Error("no legend entry for the second series")
	}
}

func TestWritePointsLandOnTheirPixels(t *testing.T) {
	// Explicit ticks fix both ranges, so the pixels are known: x from
	// marginLeftPx to widthPx-marginRightPx less the padding, y from the
	// bottom of the plot.
	c := Chart{X: Axis{Ticks: []float64{0, 10}}, Panels: []Panel{{Y: Axis{Ticks: []float64{0, 100}},
		Series: []Series{{Name: "s", Points: []Point{{0, 0}, {5, 50}, {10, 100}}}}}}}
	doc, _ := render(t, c)
	plotTop := float64(titleHeightPx + 24)
	bottom := float64(titleHeightPx + panelHeightPx - 24)
	left := float64(marginLeftPx + plotPadPx)
	right := float64(widthPx - marginRightPx - plotPadPx)
	want := []string{
		pixel(left, bottom),
		pixel((left+right)/2, (plotTop+bottom)/2),
		pixel(right, plotTop),
	}
	re := regexp.MustCompile(`<circle cx="([0-9.]+)" cy="([0-9.]+)"`)
	var got []string
	for _, m := range re.FindAllStringSubmatch(string(doc), -1) {
		got = append(got, m[1]+","+m[2])
	}
	if !slices.Equal(got, want) {
		t.Errorf("markers at %v, want %v", got, want)
	}
}

func pixel(x, y float64) string {
	return strconv.FormatFloat(x, 'f', 1, 64) + "," + strconv.FormatFloat(y, 'f', 1, 64)
}

func TestWriteOnePointEmptyAndNaNOnly(t *testing.T) {
	c := Chart{X: Axis{Log: true}, Panels: []Panel{
		{Title: "one", Series: []Series{{Name: "one", Points: []Point{{64, 3}}}}},
		{Title: "empty", Series: []Series{{Name: "none"}}},
		{Title: "nan", Series: []Series{{Name: "nan", Points: []Point{{math.NaN(), 1}, {2, math.NaN()}}}}},
	}}
	doc, elements := render(t, c)
	if got := count(elements, "polyline"); got != 0 {
		t.Errorf("%d polylines, want 0 (one point is a marker only)", got)
	}
	if got := count(elements, "circle"); got != 1 {
		t.Errorf("%d circles, want 1", got)
	}
	if got := strings.Count(string(doc), ">no data<"); got != 2 {
		t.Errorf("%d no-data notes, want 2", got)
	}
	if strings.Contains(string(doc), "NaN") {
		t.Error("NaN reached the document")
	}
	// No panel and no series at all is still a document.
	render(t, Chart{Title: "nothing"})
}

func TestLogAxisDropsNonPositive(t *testing.T) {
	c := Chart{X: Axis{Log: true}, Panels: []Panel{{Y: Axis{Log: true},
		Series: []Series{{Name: "s", Points: []Point{{0, 5}, {1, 0}, {1, -2}, {10, 5}, {100, 50}}}}}}}
	_, elements := render(t, c)
	if got := count(elements, "circle"); got != 2 {
		t.Errorf("%d circles, want 2", got)
	}
}
