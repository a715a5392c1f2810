package admin

import (
	"context"
	"net/http"

	"github.com/fibril-go/fibril/core/node"
)

// GET /admin/api/cohorts (SPEC 11): the exclusive consumer groups the Node
// holds (docs/cohorts.md). Invariants:
//   - the answer is the Node's own registry, asked as an operator request
//     (node.CohortsRequest through Broker.Call), never the driver's
//     bookkeeping: what it shows is what the machine assigned and told the
//     partitions;
//   - an observation: it changes nothing and is not audited;
//   - cohorts are volatile: after a restart the list is empty until
//     members join again.

// cohortsBackend is what this endpoint needs of the broker.
type cohortsBackend interface {
	Cohorts(ctx context.Context) (*node.CohortList, error)
}

// CohortJSON is one cohort. Group is the queue's group ("" the default
// group, as in GET /admin/api/queues); ConsumerGroup is the cohort's id.
type CohortJSON struct {
	Topic          string             `json:"topic"`
	Group          string             `json:"group"`
	ConsumerGroup  string             `json:"consumer_group"`
	Generation     uint64             `json:"generation"`
	PartitionCount uint32             `json:"partition_count"`
	Pending        bool               `json:"pending"`
	Members        []CohortMemberJSON `json:"members"`
}

// CohortMemberJSON is one member. ConsumerTarget is null when none was
// asked for.
type CohortMemberJSON struct {
	MemberID       string   `json:"member_id"`
	Session        uint64   `json:"session"`
	Subscribed     []uint32 `json:"subscribed_partitions"`
	Owned          []uint32 `json:"owned_partitions"`
	ConsumerTarget *uint32  `json:"consumer_target"`
}

func cohortsJSON(l *node.CohortList) map[string]any {
	out := make([]CohortJSON, 0, len(l.Cohorts))
	for _, c := range l.Cohorts {
		cj := CohortJSON{Topic: c.Topic, Group: c.Group, ConsumerGroup: c.CohortID, Generation: c.Generation,
			PartitionCount: c.PartitionCount, Pending: c.Pending, Members: make([]CohortMemberJSON, 0, len(c.Members))}
		for _, m := range c.Members {
			mj := CohortMemberJSON{MemberID: m.Member.String(), Session: uint64(m.Session),
				Subscribed: append([]uint32{}, m.Subscribed...), Owned: append([]uint32{}, m.Owned...)}
			if m.Target != 0 {
				t := m.Target
				mj.ConsumerTarget = &t
			}
			cj.Members = append(cj.Members, mj)
		}
		out = append(out, cj)
	}
	v := map[string]any{"cohorts": out}
	if l.Truncated {
		v["truncated"] = true
	}
	return v
}

func (s *Server) cohortsView(ctx context.Context) (map[string]any, error) {
	b, err := backend[cohortsBackend](s)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, queueCallTimeout)
	defer cancel()
	l, err := b.Cohorts(ctx)
	if err != nil {
		return nil, problem(http.StatusServiceUnavailable, "not_ready", "the broker did not answer the cohorts view: %v; retry shortly", err)
	}
	return cohortsJSON(l), nil
}

func init() {
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("GET /admin/api/cohorts", s.api(func(w http.ResponseWriter, r *http.Request) error {
			v, err := s.cohortsView(r.Context())
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, v)
			return nil
		}))
	})
	eventFamilies["cohorts"] = func(s *Server, ctx context.Context) (any, error) { return s.cohortsView(ctx) }
}
