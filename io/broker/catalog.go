//go:build !fibril_next

package broker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"

	"github.com/fibril-go/fibril/core"
)

// The catalogue lists every declared queue with its partition count and
// declared settings, so the broker knows its queues at boot without opening
// their logs (SPEC §9 lazy load), and a declare costs one small fsynced append
// whether or not the queue's partitions are loaded. Invariants:
//   - a queue's partition count never changes once recorded (standalone
//     partitioning is fixed);
//   - the file is an append-only list of JSON lines, the last line of a queue
//     wins; it is compacted (rewritten atomically) when it holds many more
//     lines than queues;
//   - a loaded partition whose settings differ from the catalogue's is sent a
//     Declare, so its log (the replicated truth) catches up.

type queueName struct {
	Topic string `json:"topic"`
	Group string `json:"group,omitempty"`
}

// queueSettings are a queue's declared settings; nil fields were never
// declared and keep the core's defaults.
type queueSettings struct {
	DLQ          *core.DLQPolicy `json:"dlq,omitempty"`
	MaxRetries   *uint32         `json:"max_retries,omitempty"`
	DefaultTTLMs *int64          `json:"default_ttl_ms,omitempty"`
}

type catalogEntry struct {
	queueName
	Partitions uint32        `json:"partitions"`
	Settings   queueSettings `json:"settings"`
}

// catalogCompactionLinesMin: below this many lines the file is never rewritten.
const catalogCompactionLinesMin = 1024

type catalog struct {
	mu      sync.Mutex
	path    string
	file    *os.File
	lines   int
	entries map[queueName]*catalogEntry
}

func openCatalog(dataDir string) (*catalog, error) {
	c := &catalog{path: filepath.Join(dataDir, "catalog.jsonl"), entries: map[queueName]*catalogEntry{}}
	data, err := os.ReadFile(c.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e catalogEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// A torn last line from a crash mid-append: the declare was never
			// acknowledged, so dropping it loses nothing promised.
			break
		}
		if core.ValidateName(e.Topic) != nil || (e.Group != "" && core.ValidateName(e.Group) != nil) || e.Partitions == 0 {
			return nil, fmt.Errorf("catalog: invalid entry %+v", e)
		}
		entry := e
		c.entries[e.queueName] = &entry
		c.lines++
	}
	if err := c.rewrite(); err != nil { // compacts, and drops a torn tail
		return nil, err
	}
	return c, nil
}

// partitions returns a queue's partition count, or 0 when it is unknown.
func (c *catalog) partitions(q queueName) uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[q]; e != nil {
		return e.Partitions
	}
	return 0
}

func (c *catalog) settings(q queueName) queueSettings {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[q]; e != nil {
		return e.Settings
	}
	return queueSettings{}
}

// ensure records q with count partitions unless it exists, and returns the
// effective count (the existing one wins, PROTOCOL.md §5.12).
func (c *catalog) ensure(q queueName, count uint32, queuesMax int) (uint32, error) {
	return c.declare(q, count, queueSettings{}, queuesMax)
}

// declare records q (creating it with count partitions) and merges the
// present fields of patch into its settings, durably.
func (c *catalog) declare(q queueName, count uint32, patch queueSettings, queuesMax int) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[q]
	if e != nil && patch.DLQ == nil && patch.MaxRetries == nil && patch.DefaultTTLMs == nil {
		return e.Partitions, nil // nothing changes
	}
	if e == nil && len(c.entries) >= queuesMax {
		return 0, errTooManyQueues
	}
	next := catalogEntry{queueName: q, Partitions: count}
	if e != nil {
		next = *e
	}
	if patch.DLQ != nil {
		next.Settings.DLQ = patch.DLQ
	}
	if patch.MaxRetries != nil {
		next.Settings.MaxRetries = patch.MaxRetries
	}
	if patch.DefaultTTLMs != nil {
		next.Settings.DefaultTTLMs = patch.DefaultTTLMs
	}
	line, err := json.Marshal(next)
	if err != nil {
		return 0, err
	}
	if _, err := c.file.Write(append(line, '\n')); err != nil {
		return 0, fmt.Errorf("catalog: %w", err)
	}
	if err := c.file.Sync(); err != nil {
		return 0, fmt.Errorf("catalog: %w", err)
	}
	c.entries[q] = &next
	c.lines++
	if c.lines > catalogCompactionLinesMin && c.lines > 4*len(c.entries) {
		if err := c.rewrite(); err != nil {
			return 0, err
		}
	}
	return next.Partitions, nil
}

var errTooManyQueues = errors.New("too many queues: see the broker's QueuesMax")

// rewrite writes one line per queue through a temporary file and reopens the
// catalogue for appends.
func (c *catalog) rewrite() error {
	var buf bytes.Buffer
	for _, e := range c.listLocked() {
		line, err := json.Marshal(e)
		if err != nil {
			return err
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	if err := writeFileAtomic(c.path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	if c.file != nil {
		c.file.Close()
	}
	f, err := os.OpenFile(c.path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	c.file, c.lines = f, len(c.entries)
	return nil
}

func (c *catalog) list() []catalogEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.listLocked()
}

func (c *catalog) listLocked() []catalogEntry {
	out := make([]catalogEntry, 0, len(c.entries))
	for _, e := range c.entries {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Group < out[j].Group
	})
	return out
}

func (c *catalog) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.file != nil {
		c.file.Close()
	}
}

// partitionDir is where one partition's log lives. '@' cannot appear in a
// name, so "topic@group" never collides with an ungrouped topic.
func partitionDir(dataDir string, id core.QueueID) string {
	name := id.Topic
	if id.Group != "" {
		name += "@" + id.Group
	}
	return filepath.Join(dataDir, "queues", name, strconv.FormatUint(uint64(id.Partition), 10))
}

// declareInput is the Declare a partition needs to match the catalogue, or
// nil when it already does.
func (s queueSettings) declareInput(current core.QueueSettings) *core.Declare {
	in := &core.Declare{DLQ: s.DLQ, MaxRetries: s.MaxRetries, DefaultTTLMs: s.DefaultTTLMs}
	differs := (s.DLQ != nil && *s.DLQ != current.DLQ) ||
		(s.MaxRetries != nil && *s.MaxRetries != current.MaxRetries) ||
		(s.DefaultTTLMs != nil && *s.DefaultTTLMs != current.DefaultTTLMs)
	if !differs {
		return nil
	}
	return in
}
