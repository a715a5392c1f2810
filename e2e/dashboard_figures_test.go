package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/fibril-go/fibril/client"
	"github.com/fibril-go/fibril/dashboard"
)

// TestMeasureDashboardPages (FIBRIL_MEASURE=1): every page of the dashboard
// loaded `loads` times with the cache off against one broker with a few
// queues, a stream and a consumer, on a quiet tab: the median first
// contentful paint and the bytes of each load, written to
// dashboard-page-figures.json beside the screenshots. A measurement for the
// notes, never an assertion.
func TestMeasureDashboardPages(t *testing.T) {
	if os.Getenv("FIBRIL_MEASURE") == "" {
		t.Skip("a measurement: FIBRIL_MEASURE=1 go test ./e2e -run TestMeasureDashboardPages -v")
	}
	const loads = 7
	s, a, p := startDashboard(t)
	c := dial(t, s, client.TransportTCP)
	for _, topic := range []string{"m-orders", "m-billing", "m-mail"} {
		for range 20 {
			publishText(t, c, topic, "hello")
		}
	}
	a.json("POST", "/admin/api/streams", `{"topic":"m-events","partition_count":2}`, 201, nil)
	type figure struct {
		Page          string  `json:"page"`
		Path          string  `json:"path"`
		HTMLBytes     int64   `json:"html_bytes"`
		CSSBytes      int64   `json:"css_bytes"`
		JSBytes       int64   `json:"js_bytes"`
		APIBytes      int64   `json:"api_bytes"`
		PaintMedianMs float64 `json:"first_contentful_paint_median_ms"`
		PaintMinMs    float64 `json:"first_contentful_paint_min_ms"`
		PaintMaxMs    float64 `json:"first_contentful_paint_max_ms"`
	}
	var out []figure
	for _, pg := range dashboard.Pages {
		path := pg.Path
		if pg.ID == "queue" {
			path += "?topic=m-orders"
		}
		if pg.ID == "messages" {
			path += "?topic=m-orders"
		}
		var paints []float64
		var last pageFigures
		for range loads {
			last = p.measure(pg.ID+"-quiet", path)
			paints = append(paints, last.FirstPaintMs)
		}
		sort.Float64s(paints)
		out = append(out, figure{Page: pg.ID, Path: path, HTMLBytes: last.HTMLBytes, CSSBytes: last.CSSBytes, JSBytes: last.JSBytes,
			APIBytes: last.APIBytes, PaintMedianMs: paints[loads/2], PaintMinMs: paints[0], PaintMaxMs: paints[loads-1]})
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	file := filepath.Join(dashboardShotsDir(), "dashboard-page-figures.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s:\n%s", file, b)
}
