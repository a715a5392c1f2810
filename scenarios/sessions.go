package scenarios

// Sessions that drop and resume: clients drop their links on purpose and
// by resets, and come back sooner or later than the reconnect grace (1 s):
// inside it they must find their session (resumed) with its subscriptions
// and unsettled deliveries, and their late acks must settle; outside it
// the session ended and its deliveries were requeued. A crash in between
// makes them resume across a restart (resumed_after_restart from the
// persisted skeleton, old tags dead).

import "github.com/fibril-go/fibril/sim"

// SessionsResume drops client links and resumes their sessions.
func SessionsResume() *sim.Scenario {
	s := base("sessions", "sessions drop and resume inside and outside the grace, and across a restart")
	w := &s.Workload
	w.DisconnectRatio = 0.04
	w.ReconnectDelayMinMs, w.ReconnectDelayMaxMs = 10, 1600
	w.ProcessMaxMs = 80
	w.AutoAckRatio = 0.2
	s.Faults.ConnectionResetRatio = 0.002
	s.Schedule = []sim.ScheduledFault{
		{AtMs: 900, Kind: sim.FaultDropSessions, Ratio: 0.7},
		{AtMs: 1900, Kind: sim.FaultDropSessions, Ratio: 0.7},
		{AtMs: 2700, Kind: sim.FaultCrash},
		{AtMs: 3600, Kind: sim.FaultDropSessions, Ratio: 0.7},
	}
	return s
}
