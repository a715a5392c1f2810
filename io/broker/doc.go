// Package broker is Fibril's production driver of the node core
// (core/node): it moves bytes, time and storage completions into the
// machines and their effects out, over real connections and real logs. It
// holds no decision a client can observe; the simulator (sim/) drives the
// very same machines.
//
// Shape (one goroutine per job, no lock held across a Step or I/O):
//
//   - actors (actor.go): the Node and every Session machine, each with a
//     mailbox; whoever pushes into an idle mailbox drains it, so a frame is
//     usually stepped on its reader's goroutine with no extra hop (a
//     partition runner hands the sessions it fed to goroutines of their
//     own, so its clients' frames never serialise onto it);
//   - connections (conn.go): a reader per socket (frames to the Node until
//     it binds the connection, then to the session; the client
//     backpressure path) and a writer per socket (many frames per write);
//   - partition runners (host.go): a goroutine per loaded partition that
//     steps its Host (a queue's) or StreamHost (a stream's, host_stream.go),
//     hands entries to the partition's group-commit writer (io/logstore),
//     feeds durability back, reads stored payloads back before they leave,
//     has the writer read a stream's log back for lagging subscribers, and
//     sleeps until the machine's wake-up;
//   - the Node's log (nodelog.go), the password-check pool (auth.go), the
//     router (actor.go: envelopes by address, FIFO per sender/receiver
//     pair, bounced to the sender when the receiver does not exist), and a
//     monotonic clock anchored at boot (clock.go).
package broker
