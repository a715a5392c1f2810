package sweep

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibril-go/fibril/bench"
	"github.com/fibril-go/fibril/client"
)

// TestTinySweepEndToEnd builds the real binary, runs a two-point partitions
// sweep of a few hundred messages against brokers it starts itself, and
// checks the printed lines, the table, the TSV and the SVG.
func TestTinySweepEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts fibril serve twice")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fibril")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/fibril")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building fibril: %v\n%s", err, out)
	}
	outDir := filepath.Join(dir, "out")
	var stdout, stderr bytes.Buffer
	started := time.Now()
	allOK, err := Run(Options{Kind: KindPartitions, Bin: bin, Transport: client.TransportTCP,
		Points: []float64{1, 4}, Base: Base{Msgs: 300, SizeBytes: 1024}, Timeout: 60 * time.Second,
		OutDir: outDir, WorkDir: filepath.Join(dir, "work"), Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Logf("two points in %v", time.Since(started))
	if !allOK {
		t.Fatalf("a point failed:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	text := stdout.String()
	var results []map[string]string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "sweep=") {
			fields, err := bench.ParseLine(l)
			if err != nil {
				t.Fatal(err)
			}
			results = append(results, fields)
		}
	}
	if len(results) != 2 || results[0]["x"] != "1" || results[1]["x"] != "4" {
		t.Fatalf("want lines for x=1 and x=4:\n%s", text)
	}
	for _, r := range results {
		if r["confirmed"] != "300" || r["status"] != bench.StatusOK || r["server_rss_mb"] == "" {
			t.Errorf("line %v: want 300 confirmed, status ok and a server sample", r)
		}
	}
	if !strings.Contains(text, "| x | status | msgs/s |") || !strings.Contains(text, "| 4 | ok | ") {
		t.Errorf("no table in the output:\n%s", text)
	}
	// The point's data dirs are gone; the work dir is the caller's to remove.
	if entries, _ := os.ReadDir(filepath.Join(dir, "work")); len(entries) > 1 { // config/ stays
		t.Errorf("data dirs left behind: %v", entries)
	}

	tsv, err := os.ReadFile(filepath.Join(outDir, "partitions.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(string(tsv)), "\n")
	if len(rows) != 3 || !strings.HasPrefix(rows[0], "x\tstatus\tmsgs_per_s") || !strings.HasPrefix(rows[2], "4\tok\t") {
		t.Errorf("TSV:\n%s", tsv)
	}

	svg, err := os.ReadFile(filepath.Join(outDir, "partitions.svg"))
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	counts := map[string]int{}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
			if se.Name.Local == "svg" && se.Name.Space != "http://www.w3.org/2000/svg" {
				t.Errorf("svg element in namespace %q", se.Name.Space)
			}
		}
	}
	// Three panels (throughput; p50 and p99; CPU): four polylines, two
	// markers each, plus the latency legend's two.
	if counts["svg"] != 1 || counts["polyline"] != 4 || counts["circle"] != 10 {
		t.Errorf("SVG elements %v: want 1 svg, 4 polylines, 10 circles", counts)
	}
}
