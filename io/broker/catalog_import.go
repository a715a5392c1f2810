package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
)

// The old JSON catalogue (<data>/catalog.jsonl, one line per declare, the
// last line of a queue winning) is gone: the Node's log holds the
// catalogue now. A data directory written by an older broker is imported
// once. Invariants:
//   - the import goes through the Node like any declare (DeclareQueue), so
//     the Node's own validation and record encoding apply;
//   - the file is renamed away only after the Node answered every queue
//     (its records durable): a crash mid-import imports again at the next
//     boot, which is harmless (a redeclare of the same values);
//   - a line that does not parse, other than a torn last line (a crash
//     mid-append, never acknowledged), refuses the start: the old code
//     silently forgot every queue after it.

const (
	legacyCatalogName   = "catalog.jsonl"
	legacyCatalogMoved  = "catalog.jsonl.imported"
	legacyLineBytesMax  = 1 << 20
	importSessionIDBase = node.SessionID(1) << 62 // above every minted id (< 2^40)
)

// importAddr is the sender of the import's declares: no machine lives
// there, so the router hands its answers to the importer.
var importAddr = node.SessionAddr(importSessionIDBase)

type legacyEntry struct {
	Topic      string `json:"topic"`
	Group      string `json:"group,omitempty"`
	Partitions uint32 `json:"partitions"`
	Settings   struct {
		DLQ          *core.DLQPolicy `json:"dlq,omitempty"`
		MaxRetries   *uint32         `json:"max_retries,omitempty"`
		DefaultTTLMs *int64          `json:"default_ttl_ms,omitempty"`
	} `json:"settings"`
}

type catalogImport struct {
	path    string
	mu      sync.Mutex
	waiting map[uint64]string // token -> queue, for logs
	done    chan struct{}
	failed  bool
}

// readLegacyCatalog parses the old file: the last line of each queue wins.
func readLegacyCatalog(path string) ([]legacyEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := bytes.Split(data, []byte("\n"))
	byQueue := map[[2]string]int{}
	var out []legacyEntry
	for i, line := range lines {
		if len(line) == 0 {
			continue
		}
		var e legacyEntry
		if len(line) > legacyLineBytesMax || json.Unmarshal(line, &e) != nil {
			if i == len(lines)-1 {
				break // torn last line: its declare was never acknowledged
			}
			return nil, fmt.Errorf("%s line %d is corrupt; fix or remove it (queues after it would be lost)", path, i+1)
		}
		if core.ValidateName(e.Topic) != nil || (e.Group != "" && core.ValidateName(e.Group) != nil) || e.Partitions == 0 {
			return nil, fmt.Errorf("%s line %d holds an invalid queue %q", path, i+1, e.Topic)
		}
		key := [2]string{e.Topic, e.Group}
		if k, seen := byQueue[key]; seen {
			out[k] = e
			continue
		}
		byQueue[key] = len(out)
		out = append(out, e)
	}
	return out, nil
}

// importLegacyCatalog declares every queue of an old catalogue file to the
// Node and, once all are answered, renames the file away.
func (b *Broker) importLegacyCatalog() error {
	path := filepath.Join(b.cfg.DataDir, legacyCatalogName)
	entries, err := readLegacyCatalog(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("catalog import: %w", err)
	}
	imp := &catalogImport{path: path, waiting: map[uint64]string{}, done: make(chan struct{})}
	for i := range entries {
		imp.waiting[uint64(i+1)] = entries[i].Topic
	}
	b.importer = imp
	if len(entries) == 0 {
		close(imp.done)
	}
	for i, e := range entries {
		b.deliverTo(b.nodeActor, &node.Deliver{Envelope: node.Envelope{From: importAddr, To: node.NodeAddr(), Msg: &node.DeclareQueue{
			Token: uint64(i + 1), Topic: e.Topic, Group: e.Group, PartitionCount: e.Partitions,
			DLQ: e.Settings.DLQ, MaxRetries: e.Settings.MaxRetries, DefaultTTLMs: e.Settings.DefaultTTLMs,
		}}})
	}
	select {
	case <-imp.done:
	case <-b.failed:
		return b.Err()
	}
	if imp.failed {
		return fmt.Errorf("catalog import: the node refused some queues of %s (see the log); the file is kept", path)
	}
	if err := os.Rename(path, filepath.Join(b.cfg.DataDir, legacyCatalogMoved)); err != nil {
		return fmt.Errorf("catalog import: %w", err)
	}
	b.log.Info("imported the old queue catalogue into the node log", "queues", len(entries))
	return syncDir(b.cfg.DataDir)
}

// answer takes the Node's reply to one imported declare.
func (imp *catalogImport) answer(b *Broker, msg node.Message) {
	d, ok := msg.(*node.Declared)
	assertTrue(ok, "the Node answers an imported declare with Declared")
	imp.mu.Lock()
	defer imp.mu.Unlock()
	name, waited := imp.waiting[d.Token]
	assertTrue(waited, "each imported declare is answered once")
	delete(imp.waiting, d.Token)
	if d.Err != nil {
		imp.failed = true
		b.log.Error("catalog import: queue refused", "queue", name, "err", d.Err)
	}
	if len(imp.waiting) == 0 {
		close(imp.done)
	}
}
