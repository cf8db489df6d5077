package transport

// Decorator is implemented by endpoints that wrap another: a straggler's delays (Delayed), a
// sub-communicator's view of the job's endpoint, a test's fault injector. Unwrap returns the
// wrapped endpoint.
type Decorator interface {
	Unwrap() Endpoint
}

// As finds what ep implements beyond Endpoint, the way errors.As finds an error: ep itself
// if it implements T, else the endpoint its Unwrap returns, and so on down the chain of
// decorators; false when none does. It is the one way to reach an optional interface
// (Borrower, ArenaHolder, HostLocality, Liveness, LargeSegmenter, PeerFailer, ...): a
// decorator that does not change what such an interface does needs nothing but Unwrap to
// pass it on, and one that does (it renumbers ranks, or must keep traffic on its own path)
// implements the interface itself, which As then finds first.
func As[T any](ep Endpoint) (T, bool) {
	for ep != nil {
		if t, ok := ep.(T); ok {
			return t, true
		}
		d, ok := ep.(Decorator)
		if !ok {
			break
		}
		ep = d.Unwrap()
	}
	var zero T
	return zero, false
}
