// Package store is a key-value store for the ranks of one job: one rank (rank 0 by default)
// holds the keys and serves the others over the job's own endpoint, as a service of the
// service layer. It is the store torch.distributed's rendezvous and its store-based idioms
// need (set, get, add, compare_set, wait, check, delete_key, num_keys), and it admits only the
// job's ranks because it travels over the job's connections, which only the job's ranks can
// open (the p2p transport's gater admits the peer IDs derived from the job's secret), where
// torch's own TCPStore listens on a port that anyone who reaches it may use.
//
// Its semantics are torch's (c10d's HashStore and TCPStore): values are bytes; add keeps its
// counter as a decimal number, so that get reads it back as text; compare_set sets a key to
// its desired value when it holds the expected one, or when it is absent and the expected
// value is empty, and returns the key's value afterwards (the expected one when it is absent);
// get and wait block until their keys exist or their timeout passes. The holder decides a
// timeout itself and refuses the request with an error naming the keys still missing, so
// that a client's wait that times out leaves the service usable.
//
// Every rank of the job starts the store (Start) with the same Config, and closes it (Close)
// before it leaves the job: the holder's Close returns once every other rank has closed its
// store, so that no rank loses the store while it may still call it.
package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hetsync/hetsync/service"
	"github.com/hetsync/hetsync/transport"
)

// DefaultName is the service's name when Config.Name is empty.
const DefaultName = "store"

// DefaultMaxBytes bounds Config.MaxBytes when it is zero: the store carries rendezvous
// metadata (addresses, counters, small pickled objects), and every rank's reader of the
// holder keeps a buffer of this size.
const DefaultMaxBytes = 1 << 20

// Config is the store's configuration, the same on every rank.
type Config struct {
	// Name is the service's name (DefaultName when empty): two stores on one endpoint need
	// two names.
	Name string
	// Holder is the rank that holds the keys and serves the others.
	Holder int
	// MaxBytes bounds what one call carries: its keys and values together (DefaultMaxBytes
	// when zero).
	MaxBytes int
}

// The service's operations (service.Msg.Op), in the order of opNames.
const (
	opSet uint8 = iota
	opGet
	opAdd
	opCompareSet
	opWait
	opCheck
	opDelete
	opNumKeys
)

func opNames() []string {
	return []string{"set", "get", "add", "compare_set", "wait", "check", "delete_key", "num_keys"}
}

// replyGrace is how long a client waits for the holder's answer beyond the call's own
// timeout: the holder refuses a request whose timeout passed itself, so this deadline only
// ends a wait on a holder that stopped answering while its link stayed up.
const replyGrace = 30 * time.Second

// Store is one rank's part of the store: the holder's keys on the holder, and the client of
// the holder on every other rank. Its methods may be called from any goroutine.
type Store struct {
	name     string
	rank     int
	holder   int
	maxBytes int
	svc      *service.Service
	keys     *keys // on the holder only

	callMu sync.Mutex // a client has at most one request in flight to the holder
}

// Start starts this rank's part of the store on ep. ctx bounds the store's life: cancelling
// it stops the service on this rank, as Abort does.
func Start(ctx context.Context, ep transport.Endpoint, cfg Config) (*Store, error) {
	name := cfg.Name
	if name == "" {
		name = DefaultName
	}
	rank, size := ep.Rank(), ep.Size()
	if cfg.Holder < 0 || cfg.Holder >= size {
		return nil, fmt.Errorf("store %s: rank %d: holder rank %d out of range [0, %d)", name, rank, cfg.Holder, size)
	}
	maxBytes := cfg.MaxBytes
	switch {
	case maxBytes == 0:
		maxBytes = DefaultMaxBytes
	case maxBytes < 0:
		return nil, fmt.Errorf("store %s: rank %d: negative MaxBytes %d", name, rank, maxBytes)
	}
	s := &Store{name: name, rank: rank, holder: cfg.Holder, maxBytes: maxBytes}
	// The bound holds for a request (call checks it) and for a value in a reply, which was
	// a request's once; a refusal's text quotes keys only in part (quote, timedOut).
	spec := service.Spec{Name: name, Ops: opNames(), MaxBody: max(maxBytes, 1024)}
	if rank == cfg.Holder {
		s.keys = newKeys()
		spec.Handler = &holder{s: s}
		for r := range size {
			if r != rank {
				spec.Clients = append(spec.Clients, r)
			}
		}
	} else {
		spec.Servers = []int{cfg.Holder}
	}
	svc, err := service.Start(ctx, ep, spec)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s.svc = svc
	return s, nil
}

// Rank is this rank; Holder the rank that holds the keys.
func (s *Store) Rank() int   { return s.rank }
func (s *Store) Holder() int { return s.holder }

// Set sets key to value.
func (s *Store) Set(ctx context.Context, key string, value []byte) error {
	_, err := s.call(ctx, opSet, 0, 0, []byte(key), value)
	return err
}

// Get waits until key exists, for at most timeout (no limit when timeout <= 0), and returns
// its value.
func (s *Store) Get(ctx context.Context, key string, timeout time.Duration) ([]byte, error) {
	r, err := s.call(ctx, opGet, 0, timeout, []byte(key))
	return r.value, err
}

// Add adds delta to the counter at key (an absent key counts 0) and returns the sum.
func (s *Store) Add(ctx context.Context, key string, delta int64) (int64, error) {
	r, err := s.call(ctx, opAdd, uint64(delta), 0, []byte(key))
	return int64(r.arg), err
}

// CompareSet sets key to desired when it holds expected (or is absent and expected is empty)
// and returns the key's value afterwards: expected when the key is absent.
func (s *Store) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	r, err := s.call(ctx, opCompareSet, 0, 0, []byte(key), expected, desired)
	return r.value, err
}

// Wait waits until every key exists, for at most timeout (no limit when timeout <= 0).
func (s *Store) Wait(ctx context.Context, keys []string, timeout time.Duration) error {
	_, err := s.call(ctx, opWait, 0, timeout, byteKeys(keys)...)
	return err
}

// Check says whether every key exists, without waiting.
func (s *Store) Check(ctx context.Context, keys []string) (bool, error) {
	r, err := s.call(ctx, opCheck, 0, 0, byteKeys(keys)...)
	return r.arg != 0, err
}

// DeleteKey deletes key and says whether it existed.
func (s *Store) DeleteKey(ctx context.Context, key string) (bool, error) {
	r, err := s.call(ctx, opDelete, 0, 0, []byte(key))
	return r.arg != 0, err
}

// NumKeys is the number of keys the store holds.
func (s *Store) NumKeys(ctx context.Context) (int64, error) {
	r, err := s.call(ctx, opNumKeys, 0, 0)
	return int64(r.arg), err
}

// Close ends this rank's part of the store. On a client it tells the holder so (unless the
// holder has gone). On the holder it refuses the calls still waiting for keys (nobody may set
// them any more) and returns once every client has closed its store, or when ctx ends: the
// clients still open then are told that the store is gone, and their later calls fail naming
// the holder, as calls to torch's TCPStore fail once rank 0 has exited. That is no error of
// the holder's: ranks may finish at different times, and a holder that waited for a rank
// still working (or blocked in a collective with the holder) would hold up the job's end.
func (s *Store) Close(ctx context.Context) error {
	if s.keys == nil {
		return s.svc.Close(ctx)
	}
	s.keys.close(s.errorf(s.rank, "close", "the store is closing on its holder"))
	err := s.svc.Close(ctx)
	if err != nil && ctx.Err() != nil && s.svc.Err() == nil {
		// The only failure: clients that had not closed when ctx ended.
		return nil
	}
	return err
}

// Abort stops this rank's part of the store at once, for a failed job whose ranks may never
// close theirs; calls in flight fail.
func (s *Store) Abort() {
	if s.keys != nil {
		s.keys.close(s.errorf(s.rank, "close", "the store was aborted on its holder"))
	}
	s.svc.Abort()
}

// result is what an operation answers: a value (get, compare_set) or a number (add, check,
// delete_key, num_keys).
type result struct {
	value []byte
	arg   uint64
}

// call runs operation op with its fields: on the holder against its keys, elsewhere as a
// request to the holder. arg is add's delta; timeout bounds get and wait.
func (s *Store) call(ctx context.Context, op uint8, arg uint64, timeout time.Duration, fields ...[]byte) (result, error) {
	// What travels: each field after its length.
	n := 0
	for _, f := range fields {
		n += uvarintLen(len(f)) + len(f)
	}
	if n > s.maxBytes {
		return result{}, s.errorf(s.holder, opNames()[op], "%d bytes of keys and values (key %s): the store carries at most %d in one call",
			n, quote(fields[0]), s.maxBytes)
	}
	ms := uint64(0)
	if timeout > 0 {
		ms = uint64(max(timeout.Milliseconds(), 1))
	}
	if op == opGet || op == opWait {
		arg = ms
	}
	if s.keys != nil {
		return s.local(ctx, op, arg, fields)
	}
	body := make([]byte, 0, n)
	for _, f := range fields {
		body = binary.AppendUvarint(body, uint64(len(f)))
		body = append(body, f...)
	}
	if ms > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout+replyGrace)
		defer cancel()
	}
	s.callMu.Lock()
	defer s.callMu.Unlock()
	rep, err := s.svc.Call(ctx, s.holder, service.Msg{Op: op, Arg: arg, Aux: uint32(len(fields)), Body: body})
	if err != nil {
		return result{}, err
	}
	defer rep.Release()
	r := result{arg: rep.Arg}
	if op == opGet || op == opCompareSet {
		r.value = append([]byte{}, rep.Body...)
	}
	return r, nil
}

// local runs op on the holder's own keys, waiting for a get or wait to be answered.
// The keys keep copies of what they are given and the caller gets a copy of a value, as
// through the service, so that neither side's later writes reach the other.
func (s *Store) local(ctx context.Context, op uint8, arg uint64, fields [][]byte) (result, error) {
	own := make([][]byte, len(fields))
	for i, f := range fields {
		own[i] = append([]byte{}, f...)
	}
	done := make(chan answer, 1)
	s.keys.serve(op, arg, own, func(a answer) { done <- a })
	var a answer
	select {
	case a = <-done:
	case <-ctx.Done():
		// A parked get or wait stays parked until its keys exist or its timer fires, and
		// then answers into done's buffer, which nobody reads.
		a.err = fmt.Errorf("waiting for the answer: %w", ctx.Err())
	}
	if a.err != nil {
		return result{}, &service.Error{Service: s.name, Rank: s.rank, Peer: s.holder, Op: opNames()[op], Err: a.err}
	}
	if a.value != nil {
		a.value = append([]byte{}, a.value...)
	}
	return a.result, nil
}

func (s *Store) errorf(peer int, op, format string, args ...any) error {
	return &service.Error{Service: s.name, Rank: s.rank, Peer: peer, Op: op, Err: fmt.Errorf(format, args...)}
}

func byteKeys(keys []string) [][]byte {
	b := make([][]byte, len(keys))
	for i, k := range keys {
		b[i] = []byte(k)
	}
	return b
}

// holder serves the clients' requests against the holder's keys.
type holder struct{ s *Store }

// wantFields is how many fields each operation's request carries; -1 for a list of keys.
var wantFields = [...]int{opSet: 2, opGet: 1, opAdd: 1, opCompareSet: 3, opWait: -1, opCheck: -1, opDelete: 1, opNumKeys: 0}

func (h *holder) Serve(ctx context.Context, svc *service.Service, r service.Request) error {
	if r.OneWay || int(r.Op) >= len(wantFields) {
		return fmt.Errorf("an unexpected message (operation %d, one-way %t)", r.Op, r.OneWay)
	}
	fields, err := split(r.Body, int(r.Aux))
	if err == nil && wantFields[r.Op] >= 0 && len(fields) != wantFields[r.Op] {
		err = fmt.Errorf("%d fields, want %d", len(fields), wantFields[r.Op])
	}
	if err != nil {
		// A malformed request is the client's fault: refuse it, and serve the others.
		return svc.Fail(ctx, r.Peer, r.Op, fmt.Errorf("malformed request: %w", err))
	}
	op, peer := r.Op, r.Peer
	h.s.keys.serve(op, r.Arg, fields, func(a answer) {
		// ctx is the service's own, valid after Serve returned, when a parked request is
		// answered. A send that fails means the link to the client failed, which the
		// client's reader reports as the service's error: nothing more to do here.
		if a.err != nil {
			_ = svc.Fail(ctx, peer, op, a.err)
		} else {
			_ = svc.Reply(ctx, peer, service.Msg{Op: op, Arg: a.arg, Body: a.value})
		}
	})
	return nil
}

// split reads n length-prefixed fields from body, copying them (the body is the reader's).
func split(body []byte, n int) ([][]byte, error) {
	fields := make([][]byte, 0, n)
	for range n {
		l, k := binary.Uvarint(body)
		if k <= 0 || l > uint64(len(body)-k) {
			return nil, fmt.Errorf("field %d of %d overruns the %d-byte body", len(fields)+1, n, len(body))
		}
		fields = append(fields, append([]byte{}, body[k:k+int(l)]...))
		body = body[k+int(l):]
	}
	if len(body) != 0 {
		return nil, fmt.Errorf("%d bytes after the last of %d fields", len(body), n)
	}
	return fields, nil
}

// answer is an operation's outcome on the holder.
type answer struct {
	result
	err error
}

// keys are the holder's keys and the gets and waits parked until their keys exist.
type keys struct {
	mu      sync.Mutex
	m       map[string][]byte
	waiting map[*waiter]struct{}
	closed  error // set once the holder closes: gets and waits that would park fail with it
}

// waiter is a get or wait parked until its keys exist or its timer fires.
type waiter struct {
	op     uint8
	keys   []string
	answer func(answer)
	timer  *time.Timer
}

func newKeys() *keys {
	return &keys{m: make(map[string][]byte), waiting: make(map[*waiter]struct{})}
}

// serve runs op with its fields and calls answer with the outcome: at once, or, for a get or
// wait whose keys do not all exist yet, once they do or arg milliseconds have passed.
// answer is called without k's lock held.
func (k *keys) serve(op uint8, arg uint64, fields [][]byte, answer func(answer)) {
	k.mu.Lock()
	a, w, ready := k.run(op, arg, fields, answer)
	k.mu.Unlock()
	for _, r := range ready {
		r.w.answer(r.a)
	}
	if w == nil {
		answer(a)
	}
}

// run is serve's work under k's lock: the answer, or the parked waiter; and the waiters
// that op's change released, answered (their values read) under the lock.
func (k *keys) run(op uint8, arg uint64, fields [][]byte, ans func(answer)) (answer, *waiter, []released) {
	key := ""
	if len(fields) > 0 {
		key = string(fields[0])
	}
	switch op {
	case opSet:
		k.m[key] = fields[1]
		return answer{}, nil, k.release()
	case opAdd:
		n, err := k.counter(key)
		if err != nil {
			return answer{err: err}, nil, nil
		}
		n += int64(arg)
		k.m[key] = []byte(strconv.FormatInt(n, 10))
		return answer{result: result{arg: uint64(n)}}, nil, k.release()
	case opCompareSet:
		old, ok := k.m[key]
		expected, desired := fields[1], fields[2]
		switch {
		case !ok && len(expected) == 0 || ok && string(old) == string(expected):
			k.m[key] = desired
			return answer{result: result{value: desired}}, nil, k.release()
		case !ok:
			return answer{result: result{value: expected}}, nil, nil
		}
		return answer{result: result{value: old}}, nil, nil
	case opCheck:
		return answer{result: result{arg: bit(k.missing(stringKeys(fields)) == nil)}}, nil, nil
	case opDelete:
		_, ok := k.m[key]
		delete(k.m, key)
		return answer{result: result{arg: bit(ok)}}, nil, nil
	case opNumKeys:
		return answer{result: result{arg: uint64(len(k.m))}}, nil, nil
	}
	// get and wait
	w := &waiter{op: op, keys: stringKeys(fields), answer: ans}
	if k.missing(w.keys) == nil {
		return w.answerNow(k), nil, nil
	}
	if k.closed != nil {
		return answer{err: fmt.Errorf("%s: %w", w.timedOut(k, 0), k.closed)}, nil, nil
	}
	k.waiting[w] = struct{}{}
	if arg > 0 {
		d := time.Duration(arg) * time.Millisecond
		w.timer = time.AfterFunc(d, func() { k.expire(w, d) })
	}
	return answer{}, w, nil
}

// released is a parked waiter whose keys all exist now, with its answer read under the lock.
type released struct {
	w *waiter
	a answer
}

// release takes the parked waiters whose keys all exist out of the waiting set.
func (k *keys) release() []released {
	var out []released
	for w := range k.waiting {
		if k.missing(w.keys) == nil {
			delete(k.waiting, w)
			if w.timer != nil {
				w.timer.Stop()
			}
			out = append(out, released{w: w, a: w.answerNow(k)})
		}
	}
	return out
}

// answerNow is the answer of a get or wait whose keys all exist.
func (w *waiter) answerNow(k *keys) answer {
	if w.op == opGet {
		return answer{result: result{value: k.m[w.keys[0]]}}
	}
	return answer{}
}

// expire refuses w, if it is still waiting, after d.
func (k *keys) expire(w *waiter, d time.Duration) {
	k.mu.Lock()
	_, ok := k.waiting[w]
	delete(k.waiting, w)
	var err error
	if ok {
		err = errors.New(w.timedOut(k, d))
	}
	k.mu.Unlock()
	if ok {
		w.answer(answer{err: err})
	}
}

// timedOut says which of w's keys are missing after d (0: at once).
func (w *waiter) timedOut(k *keys, d time.Duration) string {
	missing := k.missing(w.keys)
	what := "key " + quote([]byte(missing[0]))
	if len(w.keys) > 1 {
		const shown = 4
		names := make([]string, 0, shown)
		for _, m := range missing[:min(len(missing), shown)] {
			names = append(names, quote([]byte(m)))
		}
		what = fmt.Sprintf("%d of its %d keys (%s", len(missing), len(w.keys), strings.Join(names, ", "))
		if len(missing) > shown {
			what += ", ..."
		}
		what += ")"
	}
	if d == 0 {
		return what + " not set"
	}
	return fmt.Sprintf("%s not set within the timeout of %s", what, d)
}

// close refuses the parked gets and waits with err, and every later one that would park.
func (k *keys) close(err error) {
	k.mu.Lock()
	k.closed = err
	ws := k.waiting
	k.waiting = make(map[*waiter]struct{})
	out := make([]answer, 0, len(ws))
	list := make([]*waiter, 0, len(ws))
	for w := range ws {
		if w.timer != nil {
			w.timer.Stop()
		}
		list = append(list, w)
		out = append(out, answer{err: fmt.Errorf("%s: %w", w.timedOut(k, 0), err)})
	}
	k.mu.Unlock()
	for i, w := range list {
		w.answer(out[i])
	}
}

// missing are the keys of ks that do not exist.
func (k *keys) missing(ks []string) []string {
	var out []string
	for _, key := range ks {
		if _, ok := k.m[key]; !ok {
			out = append(out, key)
		}
	}
	return out
}

// counter is add's counter at key: 0 when absent, else the key's value as a decimal number.
func (k *keys) counter(key string) (int64, error) {
	v, ok := k.m[key]
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("key %s holds %s, not a counter", quote([]byte(key)), quote(v))
	}
	return n, nil
}

// quote is b quoted for a message, its first 64 bytes only: keys and values may be long, and
// a refusal's text must stay well within what a reply carries.
func quote(b []byte) string {
	if len(b) > 64 {
		return strconv.Quote(string(b[:64])) + "..."
	}
	return strconv.Quote(string(b))
}

func uvarintLen(n int) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutUvarint(buf[:], uint64(n))
}

func stringKeys(fields [][]byte) []string {
	ks := make([]string, len(fields))
	for i, f := range fields {
		ks[i] = string(f)
	}
	return ks
}

func bit(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
