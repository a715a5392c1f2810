package sweep

// The kinds of sweep, what each one's table and chart show, and how both are
// built from the result lines alone (so `fibril bench sweep` and a script
// reading its saved lines get the same table).
//
// Invariants:
//   - Every row of a table is one result line, in the order of the lines; a
//     failed point keeps its row (its status says why) and its figures are
//     left out of the chart.
//   - A figure a line lacks, or holds as NaN, prints as "-" in the markdown
//     table and as NaN in the TSV, never as 0.

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fibril-go/fibril/bench"
	"github.com/fibril-go/fibril/bench/chart"
)

// Kind names, as on the command line and in sweep=.
const (
	KindConnections = "connections"
	KindPartitions  = "partitions"
	KindQueues      = "queues"
	KindSize        = "size"
	KindConsumers   = "consumers"
	KindPrefetch    = "prefetch"
	KindBacklog     = "backlog"
	KindIdle        = "idle"
)

// Column is one table column: its heading and the result line's key.
type Column struct {
	Title string
	Key   string
}

// PanelSpec is one chart panel: the line keys drawn as its series.
type PanelSpec struct {
	Title  string
	YTitle string
	LogY   bool
	Keys   []string
	Names  []string // legend names, one per key
}

// Kind is one sweep.
type Kind struct {
	Name          string
	About         string // one line for the usage text
	DefaultPoints []float64
	XTitle        string
	XBytes        bool // x values are sizes: label them 64 B, 1 MiB
	Columns       []Column
	Panels        []PanelSpec
}

// throughputColumns are the figures every workload kind reports.
var throughputColumns = []Column{
	{"msgs/s", "msgs_per_s"}, {"p50 ms", "p50_ms"}, {"p99 ms", "p99_ms"},
	{"server CPU µs/msg", "server_cpu_us_per_msg"}, {"server RSS MiB", "server_rss_mb"},
	{"peak RSS MiB", "server_peak_rss_mb"},
}

var throughputPanels = []PanelSpec{
	{Title: "Throughput", YTitle: "msgs/s", Keys: []string{"msgs_per_s"}, Names: []string{"msgs/s"}},
	{Title: "Latency", YTitle: "ms (log)", LogY: true, Keys: []string{"p50_ms", "p99_ms"}, Names: []string{"p50", "p99"}},
	{Title: "Server cost", YTitle: "CPU µs per message", Keys: []string{"server_cpu_us_per_msg"}, Names: []string{"CPU µs/msg"}},
}

func withColumns(extra ...Column) []Column {
	return append(slices.Clone(throughputColumns), extra...)
}

// Kinds lists every sweep in the order the usage shows them.
var Kinds = []Kind{
	{Name: KindConnections, About: "N connections on one queue (all producers, or half/half with -scenario end-to-end)",
		DefaultPoints: []float64{1, 10, 100, 1000}, XTitle: "connections (log)",
		Columns: withColumns(Column{"producers", "producers"}, Column{"consumers", "consumers"}, Column{"window", "window"},
			Column{"setup s", "setup_s"}),
		Panels: throughputPanels},
	{Name: KindPartitions, About: "one queue of N partitions, publishes round-robin over them",
		DefaultPoints: []float64{1, 4, 16, 64, 256}, XTitle: "partitions (log)",
		Columns: withColumns(), Panels: throughputPanels},
	{Name: KindQueues, About: "N queues, message id i to queue i mod N (confirmed-publish)",
		DefaultPoints: []float64{1, 10, 100, 1000, 10000}, XTitle: "queues (log)",
		Columns: withColumns(Column{"msgs", "msgs"}, Column{"setup s", "setup_s"}), Panels: throughputPanels},
	{Name: KindSize, About: "message size in bytes, messages scaled so each point moves about the same bytes",
		DefaultPoints: []float64{64, 256, 1024, 4096, 16384, 65536, 262144, 1048576}, XTitle: "message size (log)", XBytes: true,
		Columns: withColumns(Column{"MiB/s", "mib_per_s"}, Column{"msgs", "msgs"}),
		Panels: []PanelSpec{
			{Title: "Throughput, messages", YTitle: "msgs/s (log)", LogY: true, Keys: []string{"msgs_per_s"}, Names: []string{"msgs/s"}},
			{Title: "Throughput, bytes", YTitle: "MiB/s", Keys: []string{"mib_per_s"}, Names: []string{"MiB/s"}},
			throughputPanels[1],
		}},
	{Name: KindConsumers, About: "consumers per queue, end to end",
		DefaultPoints: []float64{1, 2, 4, 8, 16, 64}, XTitle: "consumers (log)",
		Columns: withColumns(Column{"publish msgs/s", "pub_msgs_per_s"}), Panels: throughputPanels},
	{Name: KindPrefetch, About: "prefetch per consumer, end to end",
		DefaultPoints: []float64{1, 8, 64, 256, 1024, 4096}, XTitle: "prefetch, deliveries (log)",
		Columns: withColumns(Column{"publish msgs/s", "pub_msgs_per_s"}), Panels: throughputPanels},
	{Name: KindBacklog, About: "N unread messages (-size 128): RSS, bytes per message, recovery after a restart",
		DefaultPoints: []float64{1e4, 1e5, 1e6, 1e7}, XTitle: "unread messages (log)",
		Columns: []Column{
			{"publish msgs/s", "msgs_per_s"}, {"idle RSS MiB", "rss_idle_mb"}, {"RSS MiB", "rss_mb"}, {"heap MiB", "heap_mb"},
			{"RSS bytes/msg", "rss_bytes_per_msg"}, {"heap bytes/msg", "heap_bytes_per_msg"},
			{"marginal RSS bytes/msg", "rss_marginal_bytes_per_msg"}, {"marginal heap bytes/msg", "heap_marginal_bytes_per_msg"},
			{"restart", "restart"}, {"recovery s", "recovery_s"},
			{"first delivery ms", "first_delivery_ms"}, {"RSS after recovery MiB", "rss_recovered_mb"},
		},
		Panels: []PanelSpec{
			{Title: "Memory", YTitle: "MiB (log)", LogY: true, Keys: []string{"rss_mb", "heap_mb", "rss_recovered_mb"},
				Names: []string{"RSS", "Go heap", "RSS after restart"}},
			{Title: "Memory per unread message (over the idle broker's; marginal: since the previous point)", YTitle: "bytes / message",
				Keys:  []string{"rss_bytes_per_msg", "heap_bytes_per_msg", "rss_marginal_bytes_per_msg", "heap_marginal_bytes_per_msg"},
				Names: []string{"RSS", "Go heap", "RSS, marginal", "Go heap, marginal"}},
			{Title: "Restart: recovery (start to subscribed), first delivery (subscribe to it)", YTitle: "seconds (log)", LogY: true, Keys: []string{"recovery_s", "first_delivery_s"},
				Names: []string{"recovery", "first delivery"}},
		}},
	{Name: KindIdle, About: "N idle queues (one message each): idle CPU and RSS",
		DefaultPoints: []float64{0, 100, 1000, 10000}, XTitle: "idle queues",
		Columns: []Column{{"CPU µs/s", "idle_cpu_us_per_s"}, {"CPU %", "idle_cpu_pct"}, {"RSS MiB", "rss_mb"}, {"heap MiB", "heap_mb"}},
		Panels: []PanelSpec{
			{Title: "Idle CPU", YTitle: "CPU µs per second", Keys: []string{"idle_cpu_us_per_s"}, Names: []string{"CPU µs/s"}},
			{Title: "Idle memory", YTitle: "MiB", Keys: []string{"rss_mb", "heap_mb"}, Names: []string{"RSS", "Go heap"}},
		}},
}

// LookupKind finds a kind by name.
func LookupKind(name string) (Kind, bool) {
	for _, k := range Kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// KindNames is "connections, partitions, ..." for usage and errors.
func KindNames() string {
	var names []string
	for _, k := range Kinds {
		names = append(names, k.Name)
	}
	return strings.Join(names, ", ")
}

// Table is a sweep's figures: one row per point.
type Table struct {
	Kind    Kind
	Headers []string   // x, status, then the kind's column titles
	Keys    []string   // the line keys of the columns (x, status, ...)
	Rows    [][]string // formatted values, "-" for missing
	Errors  []string   // "x=1000: err" for each failed point
}

// BuildTable builds the table of kind from parsed result lines.
func BuildTable(kind Kind, lines []map[string]string) Table {
	t := Table{Kind: kind, Headers: []string{"x", "status"}, Keys: []string{"x", "status"}}
	for _, c := range kind.Columns {
		t.Headers = append(t.Headers, c.Title)
		t.Keys = append(t.Keys, c.Key)
	}
	for _, line := range lines {
		row := make([]string, 0, len(t.Keys))
		for _, key := range t.Keys {
			v, ok := line[key]
			if !ok || v == "NaN" || v == "" {
				v = "-"
			}
			row = append(row, v)
		}
		t.Rows = append(t.Rows, row)
		if status := line["status"]; status != bench.StatusOK {
			msg := line["err"]
			if msg == "" {
				msg = status
			}
			t.Errors = append(t.Errors, fmt.Sprintf("x=%s: %s", line["x"], msg))
		}
	}
	return t
}

// WriteMarkdown prints the table, then one line per failed point.
func (t Table) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.Headers, " | "))
	seps := make([]string, len(t.Headers))
	for i := range seps {
		seps[i] = "---"
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(seps, " | "))
	for _, row := range t.Rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	for _, e := range t.Errors {
		fmt.Fprintf(w, "\nfailed: %s\n", e)
	}
}

// WriteTSV writes the keys as the header row, then the rows; missing
// figures are NaN so a plotting tool reads every column as numbers.
func (t Table) WriteTSV(w io.Writer) error {
	if _, err := fmt.Fprintln(w, strings.Join(t.Keys, "\t")); err != nil {
		return err
	}
	for _, row := range t.Rows {
		cells := slices.Clone(row)
		for i, c := range cells {
			if c == "-" {
				cells[i] = "NaN"
			}
			cells[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(cells[i])
		}
		if _, err := fmt.Fprintln(w, strings.Join(cells, "\t")); err != nil {
			return err
		}
	}
	return nil
}

// number reads a figure of a line; NaN when absent or not a number.
func number(line map[string]string, key string) float64 {
	v, err := strconv.ParseFloat(line[key], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// BuildChart draws kind's panels from the lines; failed points are left out
// and named in the note.
func BuildChart(kind Kind, lines []map[string]string, system string) chart.Chart {
	xFormat := chart.FormatCount
	if kind.XBytes {
		xFormat = chart.FormatBytes
	}
	c := chart.Chart{
		Title: fmt.Sprintf("fibril bench sweep %s (%s)", kind.Name, system),
		X:     chart.Axis{Title: kind.XTitle, Log: kind.Name != KindIdle, Format: xFormat},
	}
	var failed []string
	for _, line := range lines {
		x := number(line, "x")
		if line["status"] != bench.StatusOK {
			failed = append(failed, fmt.Sprintf("%s (%s)", xFormat(x), line["status"]))
			continue
		}
		// A log axis is labelled at the sweep's own x values (1, 4, 16, ...
		// read better than 1, 10, 100 between them); a linear one (idle,
		// starting at 0) gets round ticks, as its points crowd the left.
		if c.X.Log && finiteForAxis(x, c.X.Log) {
			c.X.Ticks = append(c.X.Ticks, x)
		}
	}
	if len(failed) > 0 {
		c.Note = "not drawn, failed: " + strings.Join(failed, ", ")
	}
	for _, spec := range kind.Panels {
		p := chart.Panel{Title: spec.Title, Y: chart.Axis{Title: spec.YTitle, Log: spec.LogY}}
		for i, key := range spec.Keys {
			s := chart.Series{Name: spec.Names[i]}
			for _, line := range lines {
				if line["status"] == bench.StatusOK {
					s.Points = append(s.Points, chart.Point{X: number(line, "x"), Y: number(line, key)})
				}
			}
			p.Series = append(p.Series, s)
		}
		c.Panels = append(c.Panels, p)
	}
	return c
}

func finiteForAxis(v float64, log bool) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && (!log || v > 0)
}
