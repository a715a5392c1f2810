package ctl

// Human output: aligned tables.

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// table collects rows and prints them aligned.
type table struct {
	rows [][]string
}

func newTable(header ...string) *table { return &table{rows: [][]string{header}} }

func (t *table) add(cells ...any) {
	row := make([]string, len(cells))
	for i, c := range cells {
		row[i] = cell(c)
	}
	t.rows = append(t.rows, row)
}

func (t *table) print(r *run) {
	w := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
	for _, row := range t.rows {
		fmt.Fprintln(w, strings.Join(row, "\t"))
	}
	w.Flush()
}

func cell(v any) string {
	switch x := v.(type) {
	case string:
		if x == "" {
			return "-"
		}
		// A tab or newline would break the alignment.
		return strings.NewReplacer("\t", " ", "\n", " ").Replace(x)
	case nil:
		return "-"
	}
	return fmt.Sprint(v)
}

// msTime renders Unix milliseconds as UTC time, "-" for zero.
func msTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// queueName renders topic/group ("default" when the group is empty).
func queueName(topic, group string) string {
	if group == "" {
		group = "default"
	}
	return topic + "/" + group
}
