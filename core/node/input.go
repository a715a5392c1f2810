package node

import (
	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// The inputs of the three machines. Invariants:
//   - the set is closed: each machine panics on an input it does not take,
//     since one reaching it is a driver bug, not a client's doing;
//   - every input carries the driver's NowMs; machines keep the largest
//     seen, so a late-stamped input never moves a deadline back;
//   - inputs carry all outside randomness (Entropy) and durability
//     (Persisted): nothing here reads a clock, a disk or crypto/rand.

// Input is one of the types below. Every input carries NowMs (see doc.go,
// Time). Which machine takes which input:
//
//	input        Node  Session  Host
//	Tick          x      x       x
//	Deliver       x      x       x
//	Bounced       x      x       x
//	ConnOpened    x
//	Frame         x      x             (the Node until Bind, then the session)
//	ConnClosed    x      x
//	Written              x
//	AuthChecked          x
//	Persisted     x              x
//	LoadDone      x
//	SnapshotDone  x              x
//	Drain         x
//	StreamReadDone               x     (a StreamHost only)
type Input interface{ nowMs() int64 }

// Tick says time passed; drivers send it at Ready.WakeMs.
type Tick struct{ NowMs int64 }

// Deliver hands the receiver an envelope addressed to it.
type Deliver struct {
	NowMs    int64
	Envelope Envelope
}

// Bounced hands a sender back an envelope whose receiver does not exist.
type Bounced struct {
	NowMs    int64
	Envelope Envelope
}

// ConnOpened tells the Node about an accepted connection. Entropy seeds the
// identities minted for it (client id, resume token).
type ConnOpened struct {
	NowMs    int64
	Conn     ConnID
	Loopback bool
	Entropy  [32]byte
}

// Frame is one frame read from a connection: its header and its payload
// exactly as they arrived (the receiver decodes it with transport/wire).
// The payload is only valid during the Step: a machine copies what it keeps.
// Err, when set, says the stream broke instead (malformed header, frame
// over the size cap): Header holds what could be read, and the machine
// answers with an error and closes the connection.
type Frame struct {
	NowMs   int64
	Conn    ConnID
	Header  wire.Header
	Payload []byte
	Err     error
}

// ConnClosed says a connection is gone (EOF, read or write error, closed by
// a Ready.Close).
type ConnClosed struct {
	NowMs int64
	Conn  ConnID
}

// Written says the socket accepted Bytes more bytes of what the session
// queued (Ready.Sends); the session bounds what is queued and unwritten.
type Written struct {
	NowMs int64
	Conn  ConnID
	Bytes int
}

// AuthChecked answers a PasswordCheck: Known says a user of that name
// exists, Match that the password is theirs.
type AuthChecked struct {
	NowMs int64
	Token uint64
	Known bool
	Match bool
}

// Persisted says storage made every record (Node) or entry (Host) up to
// UpToIndex durable. For a Host, Stored lists the durable publishes whose
// payloads storage can give back (candidates for spilling), and
// ResidentTotalBytes is the broker-wide sum of resident payload bytes the
// Hosts last reported (Ready.ResidentBytes), so the spill policy sees the
// whole budget.
type Persisted struct {
	NowMs              int64
	UpToIndex          uint64
	Stored             []StoredPayload
	ResidentTotalBytes int64
}

// StoredPayload is one durable publish whose payload storage holds.
type StoredPayload struct {
	Offset uint64
	Ref    core.PayloadRef
}

// LoadDone answers a LoadRequest: the partition's Host exists now, or Err
// says why it could not be loaded (the Node fails the Opens waiting on it
// and may try again later).
type LoadDone struct {
	NowMs int64
	Queue core.QueueID
	Err   error
	// Damage: the log failed a recovery check and was not loaded (SPEC 7;
	// the Node decides what that means, node_quarantine.go). Err is nil.
	Damage *LoadDamage
	// Cut: a load with LoadRequest.Truncate cut the log first.
	Cut *LoadCut
}

// SnapshotDone answers a SnapshotRequest.
type SnapshotDone struct {
	NowMs int64
	Index uint64
	Err   error
}

func (in *Tick) nowMs() int64         { return in.NowMs }
func (in *Deliver) nowMs() int64      { return in.NowMs }
func (in *Bounced) nowMs() int64      { return in.NowMs }
func (in *ConnOpened) nowMs() int64   { return in.NowMs }
func (in *Frame) nowMs() int64        { return in.NowMs }
func (in *ConnClosed) nowMs() int64   { return in.NowMs }
func (in *Written) nowMs() int64      { return in.NowMs }
func (in *AuthChecked) nowMs() int64  { return in.NowMs }
func (in *Persisted) nowMs() int64    { return in.NowMs }
func (in *LoadDone) nowMs() int64     { return in.NowMs }
func (in *SnapshotDone) nowMs() int64 { return in.NowMs }

// Drain tells the Node the broker is going away (a planned shutdown): every
// session with a transport is told (GOING_AWAY with GraceMs). For GraceMs
// the Node still accepts connections and sessions that lose their transport
// go dormant as usual (PROTOCOL 5.23); after it, connections are refused
// and a session that loses its transport ends at once.
type Drain struct {
	NowMs   int64
	GraceMs int64
	Message string
}

func (in *Drain) nowMs() int64 { return in.NowMs }

// StreamReadDone answers a StreamRead of a StreamHost: the log entries from
// its FromIndex on (bodies resolved, at most MaxEntries), or Err. Token is
// the read's.
type StreamReadDone struct {
	NowMs   int64
	Token   uint64
	Entries []core.Entry
	Err     *core.Error
}

func (in *StreamReadDone) nowMs() int64 { return in.NowMs }
