package admin

// Event families for the dashboard's Settings and Security pages:
// runtime-settings, global-dlq, tls and users, each the JSON of the
// endpoint of the same name under /admin/api/ (which is also what a page
// polls when the stream fails). Invariants:
//   - a family is a read of what its endpoint answers, built by the same
//     function, so the stream and the endpoint never disagree;
//   - like every family, it is built only in a tick where someone watches
//     it (events.go); the runtime ones ask the Node once per tick, bounded
//     by the tick's deadline.

import (
	"context"
)

func init() {
	eventFamilies["runtime-settings"] = func(s *Server, ctx context.Context) (any, error) {
		b, err := backend[runtimeBackend](s)
		if err != nil {
			return nil, err
		}
		st, err := b.RuntimeSettings(ctx)
		if err != nil {
			return nil, runtimeCallFailed(err)
		}
		return runtimeJSONOf(&st), nil
	}
	eventFamilies["global-dlq"] = func(s *Server, ctx context.Context) (any, error) {
		b, err := backend[runtimeBackend](s)
		if err != nil {
			return nil, err
		}
		st, err := b.GlobalDLQ(ctx)
		if err != nil {
			return nil, runtimeCallFailed(err)
		}
		return globalDLQJSONOf(&st), nil
	}
	eventFamilies["tls"] = func(s *Server, _ context.Context) (any, error) {
		h, err := s.tlsHolder()
		if err != nil {
			return nil, err
		}
		return tlsInfo(h.Current(), s.surf.opts.ServeTLS), nil
	}
	eventFamilies["users"] = func(s *Server, _ context.Context) (any, error) {
		b, err := backend[usersBackend](s)
		if err != nil {
			return nil, err
		}
		return usersJSON(b), nil
	}
}
