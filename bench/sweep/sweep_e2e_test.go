package sweep

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
	bin := buildFibril(t)
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

var (
	builtOnce sync.Once
	builtBin  string
	builtErr  error
)

// TestMain removes the binary buildFibril made.
func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}

// buildFibril builds cmd/fibril once for every test of the package.
func buildFibril(t *testing.T) string {
	t.Helper()
	builtOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fibril-sweep-test")
		if err != nil {
			builtErr = err
			return
		}
		builtBin = filepath.Join(dir, "fibril")
		if out, err := exec.Command("go", "build", "-o", builtBin, "../../cmd/fibril").CombinedOutput(); err != nil {
			builtErr = fmt.Errorf("building fibril: %v\n%s", err, out)
		}
	})
	if builtErr != nil {
		t.Fatal(builtErr)
	}
	return builtBin
}

// The backlog's restart stops the broker the way it was asked: SIGTERM
// lets it exit cleanly, SIGKILL ends it with no shutdown code run.
func TestBrokerRestartStopsAsAsked(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts fibril serve")
	}
	bin := buildFibril(t)
	b, err := StartBroker(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, kill := range []bool{false, true} {
		if err := b.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		old := b.cmd
		if err := b.Restart(kill); err != nil {
			t.Fatal(err)
		}
		status := old.ProcessState.Sys().(syscall.WaitStatus)
		if kill && (!status.Signaled() || status.Signal() != syscall.SIGKILL) {
			t.Fatalf("Restart(kill) ended the broker with %v, want SIGKILL", old.ProcessState)
		}
		if !kill && (status.Signaled() || status.ExitStatus() != 0) {
			t.Fatalf("Restart(clean) ended the broker with %v, want a clean exit", old.ProcessState)
		}
	}
	if err := b.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// A backlog point with the SIGKILL restart recovers, delivers and says how
// it was restarted.
func TestBacklogSweepAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts fibril serve")
	}
	bin := buildFibril(t)
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	allOK, err := Run(Options{Kind: KindBacklog, Bin: bin, Transport: client.TransportTCP, Points: []float64{2000},
		Base: Base{Msgs: 2000, SizeBytes: 1024}, Timeout: 60 * time.Second, RestartKill: true,
		OutDir: filepath.Join(dir, "out"), WorkDir: filepath.Join(dir, "work"), Stdout: &stdout, Stderr: &stderr})
	if err != nil || !allOK {
		t.Fatalf("Run: %v, all ok %v\n%s\nstderr:\n%s", err, allOK, stdout.String(), stderr.String())
	}
	for _, l := range strings.Split(stdout.String(), "\n") {
		if !strings.HasPrefix(l, "sweep=") {
			continue
		}
		fields, err := bench.ParseLine(l)
		if err != nil {
			t.Fatal(err)
		}
		if fields["restart"] != "sigkill" || fields["status"] != bench.StatusOK || fields["recovery_s"] == "" || fields["first_delivery_ms"] == "" {
			t.Fatalf("line %v: want restart=sigkill, status ok, recovery_s and first_delivery_ms", fields)
		}
		return
	}
	t.Fatalf("no result line:\n%s", stdout.String())
}
