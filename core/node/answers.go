package node

import "github.com/fibril-go/fibril/core"

// answerBatch gathers one partition step's answers per session, so that a
// Persisted answering a whole round of publishes sends one envelope per
// session (Responses, or a Response when there is one) instead of one per
// answer: one envelope and one session step per answer cost the broker more
// than the answers themselves. Both Host kinds use it. Invariants:
//   - a batch holds one session's answers in the order they were added;
//     nothing else goes to a session while a step's replies are routed, so
//     the batch keeps its place in the (partition, session) FIFO;
//   - flush empties it: no answer outlives its step;
//   - a Response handed out is never written again (its receiver owns it),
//     so Responses share blocks of responsesBlockLen.
type answerBatch struct {
	answered []sessionAnswers
	left     int        // replies of the step not added yet, this one included
	block    []Response // the unused tail of the current block
}

// sessionAnswers is one session's answers of one step.
type sessionAnswers struct {
	session SessionID
	items   []Response
}

// responsesBlockLen is how many Responses one allocation holds. 64
// amortises the allocation well below the per-publish cost while a partly
// used block pins little memory.
const responsesBlockLen = 64

// begin starts a step that will add up to n answers.
func (b *answerBatch) begin(n int) {
	assertHold(len(b.answered) == 0, "answers of an earlier step were never sent")
	b.left = n
}

// add adds one answer to its session's batch; next follows every reply of
// the step (answered or not), so that left stays the replies still to come.
func (b *answerBatch) add(session SessionID, token uint64, r *core.Reply) {
	assertHold(b.left > 0, "more answers than the step has replies")
	// Linear: a step answers few sessions, and the last one most often.
	for i := len(b.answered) - 1; i >= 0; i-- {
		if b.answered[i].session == session {
			b.answered[i].items = append(b.answered[i].items, Response{Token: token, Reply: *r})
			return
		}
	}
	// Room for every reply left in the step: no doubling series, and in
	// most steps (one or two sessions answered) no allocation of its own.
	items := append(b.slots(b.left), Response{Token: token, Reply: *r})
	b.answered = append(b.answered, sessionAnswers{session: session, items: items})
}

// next moves to the step's next reply, whether this one was added or
// nobody waited for it.
func (b *answerBatch) next() { b.left-- }

// flush sends every session's batch and empties it.
func (b *answerBatch) flush(send func(Address, Message)) {
	for i := range b.answered {
		a := &b.answered[i]
		if len(a.items) == 1 {
			send(SessionAddr(a.session), &a.items[0])
		} else {
			send(SessionAddr(a.session), &Responses{Items: a.items})
		}
		// The slice went to the receiver with the envelope: never reuse it.
		*a = sessionAnswers{}
	}
	b.answered = b.answered[:0]
	b.left = 0
}

// slots hands out room for n Responses from the current block (a fresh
// slice when n is more than a block holds).
func (b *answerBatch) slots(n int) []Response {
	assertHold(n > 0, "room asked for no answer")
	if n > responsesBlockLen {
		return make([]Response, 0, n)
	}
	if len(b.block) < n {
		b.block = make([]Response, responsesBlockLen)
	}
	slots := b.block[:0:n]
	b.block = b.block[n:]
	assertHold(slots[:1][0].Token == 0, "a Response of the block was handed out twice")
	return slots
}
