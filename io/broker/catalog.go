package broker

import (
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

// The catalogue lists every declared queue and its partition count, so the
// broker knows its queues at boot without opening their logs (SPEC §9 lazy
// load). Invariants: a queue's partition count never changes once recorded
// (standalone partitioning is fixed); the file is replaced atomically.

type queueName struct {
	Topic string `json:"topic"`
	Group string `json:"group,omitempty"`
}

type catalogEntry struct {
	queueName
	Partitions uint32 `json:"partitions"`
}

type catalog struct {
	mu      sync.Mutex
	path    string
	entries map[queueName]uint32
}

func openCatalog(dataDir string) (*catalog, error) {
	c := &catalog{path: filepath.Join(dataDir, "catalog.json"), entries: map[queueName]uint32{}}
	data, err := os.ReadFile(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	var list []catalogEntry
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("catalog: %s is corrupt: %w", c.path, err)
	}
	for _, e := range list {
		if core.ValidateName(e.Topic) != nil || (e.Group != "" && core.ValidateName(e.Group) != nil) || e.Partitions == 0 {
			return nil, fmt.Errorf("catalog: invalid entry %+v", e)
		}
		c.entries[e.queueName] = e.Partitions
	}
	return c, nil
}

// partitions returns a queue's partition count, or 0 when it is unknown.
func (c *catalog) partitions(q queueName) uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[q]
}

// ensure records q with count partitions unless it exists, and returns the
// effective count (the existing one wins, PROTOCOL.md §5.12).
func (c *catalog) ensure(q queueName, count uint32, queuesMax int) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if existing := c.entries[q]; existing != 0 {
		return existing, nil
	}
	if len(c.entries) >= queuesMax {
		return 0, errTooManyQueues
	}
	c.entries[q] = count
	if err := c.saveLocked(); err != nil {
		delete(c.entries, q)
		return 0, err
	}
	return count, nil
}

var errTooManyQueues = errors.New("too many queues: see the broker's QueuesMax")

func (c *catalog) list() []catalogEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]catalogEntry, 0, len(c.entries))
	for q, n := range c.entries {
		out = append(out, catalogEntry{queueName: q, Partitions: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Group < out[j].Group
	})
	return out
}

func (c *catalog) saveLocked() error {
	list := make([]catalogEntry, 0, len(c.entries))
	for q, n := range c.entries {
		list = append(list, catalogEntry{queueName: q, Partitions: n})
	}
	data, err := json.Marshal(list)
	if err != nil {
		return err
	}
	return writeFileAtomic(c.path, data, 0o644)
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
