package wire

// Bodies of the handshake and connection-level frames: HELLO, HELLO_OK, AUTH,
// AUTH_OK, the shared error body, PING, PONG and GOING_AWAY (PROTOCOL.md §3, §5.1,
// §5.2, §5.21, §5.23).
//
// Invariants:
//   - ResumeOutcome is a u8 wire enum, append-only; the decoder rejects values above
//     ResumeAfterRestart.
//   - AUTH_OK, PING and PONG have no magic and an empty payload when sent. PING and
//     PONG decoders accept any payload because Fibril does not look at it (§5.2);
//     AUTH_OK is decoded strictly.
//   - HELLO_OK's compliance string is carried verbatim; checking it against
//     ComplianceMarker is the client's job, and the shared vectors use a short value.

// ComplianceMarker is the exact HELLO_OK compliance string every Fibril client
// requires (§3.2); any other value makes them close the connection.
const ComplianceMarker = "v=1;license=MIT;ai_train=disallowed;policy=AI_POLICY.md"

// ResumeIdentity is what a client presents in HELLO to resume a session: exactly the
// three values a previous HELLO_OK returned.
type ResumeIdentity struct {
	OwnerID     UUID
	ClientID    UUID
	ResumeToken UUID
}

func appendResumeIdentity(dst []byte, r ResumeIdentity) []byte {
	dst = appendUUID(dst, r.OwnerID)
	dst = appendUUID(dst, r.ClientID)
	return appendUUID(dst, r.ResumeToken)
}

func (d *decoder) resumeIdentity(string) ResumeIdentity {
	return ResumeIdentity{
		OwnerID:     d.uuid("resume.owner_id"),
		ClientID:    d.uuid("resume.client_id"),
		ResumeToken: d.uuid("resume.resume_token"),
	}
}

// Hello is HELLO (opcode 1, C→B, FHL1).
type Hello struct {
	ClientName      string // informational
	ClientVersion   string // informational
	ProtocolVersion uint16 // must be 1, else HELLO_ERR code 1
	Resume          Optional[ResumeIdentity]
}

func (m Hello) AppendTo(dst []byte) []byte {
	dst = append(dst, magicHello...)
	dst = appendStr(dst, m.ClientName)
	dst = appendStr(dst, m.ClientVersion)
	dst = appendU16(dst, m.ProtocolVersion)
	return appendOpt(dst, m.Resume, appendResumeIdentity)
}

// DecodeHello strictly decodes a HELLO payload.
func DecodeHello(b []byte) (Hello, error) {
	d := decoder{b: b, magic: magicHello}
	d.checkMagic()
	var m Hello
	m.ClientName = d.str("client_name")
	m.ClientVersion = d.str("client_version")
	m.ProtocolVersion = d.u16("protocol_version")
	m.Resume = decodeOpt(&d, "resume", (*decoder).resumeIdentity)
	return finish(&d, m)
}

// ResumeOutcome says how the broker resolved HELLO's resume identity (§7.7).
// Append-only u8 wire enum.
type ResumeOutcome uint8

const (
	ResumeNew                 ResumeOutcome = 0
	ResumeResumed             ResumeOutcome = 1
	ResumeNotFound            ResumeOutcome = 2
	ResumeRejected            ResumeOutcome = 3
	ResumeResumedAfterRestart ResumeOutcome = 4
)

// HelloOk is HELLO_OK (opcode 2, B→C, FHO1).
type HelloOk struct {
	ProtocolVersion uint16 // always 1; clients reject anything else
	OwnerID         UUID   // this broker's identity
	ClientID        UUID   // session id
	ResumeToken     UUID   // secret the client presents to resume
	ResumeOutcome   ResumeOutcome
	ServerName      string // informational
	Compliance      string // ComplianceMarker in production
}

func (m HelloOk) AppendTo(dst []byte) []byte {
	dst = append(dst, magicHelloOk...)
	dst = appendU16(dst, m.ProtocolVersion)
	dst = appendUUID(dst, m.OwnerID)
	dst = appendUUID(dst, m.ClientID)
	dst = appendUUID(dst, m.ResumeToken)
	dst = appendU8(dst, uint8(m.ResumeOutcome))
	dst = appendStr(dst, m.ServerName)
	return appendStr(dst, m.Compliance)
}

// DecodeHelloOk strictly decodes a HELLO_OK payload.
func DecodeHelloOk(b []byte) (HelloOk, error) {
	d := decoder{b: b, magic: magicHelloOk}
	d.checkMagic()
	var m HelloOk
	m.ProtocolVersion = d.u16("protocol_version")
	m.OwnerID = d.uuid("owner_id")
	m.ClientID = d.uuid("client_id")
	m.ResumeToken = d.uuid("resume_token")
	m.ResumeOutcome = ResumeOutcome(d.enumU8("resume_outcome", uint8(ResumeResumedAfterRestart)))
	m.ServerName = d.str("server_name")
	m.Compliance = d.str("compliance")
	return finish(&d, m)
}

// Auth is AUTH (opcode 10, C→B, FAU1).
type Auth struct {
	Username string
	Password string
}

func (m Auth) AppendTo(dst []byte) []byte {
	dst = append(dst, magicAuth...)
	dst = appendStr(dst, m.Username)
	return appendStr(dst, m.Password)
}

// DecodeAuth strictly decodes an AUTH payload.
func DecodeAuth(b []byte) (Auth, error) {
	d := decoder{b: b, magic: magicAuth}
	d.checkMagic()
	var m Auth
	m.Username = d.str("username")
	m.Password = d.str("password")
	return finish(&d, m)
}

// AuthOk is AUTH_OK (opcode 11, B→C): an empty payload, no magic.
type AuthOk struct{}

func (AuthOk) AppendTo(dst []byte) []byte { return dst }

// DecodeAuthOk accepts only an empty payload.
func DecodeAuthOk(b []byte) (AuthOk, error) {
	d := decoder{b: b, magic: "AUTH_OK"}
	return finish(&d, AuthOk{})
}

// Ping is PING (opcode 50, both ways): an empty payload, no magic.
type Ping struct{}

func (Ping) AppendTo(dst []byte) []byte { return dst }

// DecodePing ignores the payload: Fibril never looks at it (§5.2).
func DecodePing([]byte) (Ping, error) { return Ping{}, nil }

// Pong is PONG (opcode 51, both ways): an empty payload, no magic.
type Pong struct{}

func (Pong) AppendTo(dst []byte) []byte { return dst }

// DecodePong ignores the payload: Fibril never looks at it (§5.2).
func DecodePong([]byte) (Pong, error) { return Pong{}, nil }

// ErrorBody is the FER1 body shared by ERROR (255), HELLO_ERR (3), AUTH_ERR (12) and
// SUBSCRIBE_ERR (32); the opcode, not the body, says which.
type ErrorBody struct {
	Code    ErrorCode
	Message string // human-readable, often naming the fix (§6.3)
}

func (m ErrorBody) AppendTo(dst []byte) []byte {
	dst = append(dst, magicError...)
	dst = appendU16(dst, uint16(m.Code))
	return appendStr(dst, m.Message)
}

// DecodeErrorBody strictly decodes an FER1 payload.
func DecodeErrorBody(b []byte) (ErrorBody, error) {
	d := decoder{b: b, magic: magicError}
	d.checkMagic()
	var m ErrorBody
	m.Code = ErrorCode(d.u16("code"))
	m.Message = d.str("message")
	return finish(&d, m)
}

// GoingAway is GOING_AWAY (opcode 103, B→C push, FGA1), sent with request id 0 when
// an operator starts a drain.
type GoingAway struct {
	GraceMs uint64 // how long the broker keeps accepting reconnects and holding sessions
	Message string
}

func (m GoingAway) AppendTo(dst []byte) []byte {
	dst = append(dst, magicGoingAway...)
	dst = appendU64(dst, m.GraceMs)
	return appendStr(dst, m.Message)
}

// DecodeGoingAway strictly decodes a GOING_AWAY payload.
func DecodeGoingAway(b []byte) (GoingAway, error) {
	d := decoder{b: b, magic: magicGoingAway}
	d.checkMagic()
	var m GoingAway
	m.GraceMs = d.u64("grace_ms")
	m.Message = d.str("message")
	return finish(&d, m)
}
