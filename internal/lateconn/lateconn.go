// Package lateconn is a test connection that makes a context handler's deadline change land
// late. Code that interrupts a blocked read or write by setting a deadline in the past when a
// context ends (context.AfterFunc), and clears the deadline once the operation is over, must
// wait for that handler before clearing: otherwise the handler's past deadline can land after
// the clearing and stay on the connection. A Conn holds every past deadline back until a
// zero deadline was set after it, or until Hold passes, which turns that rare interleaving
// into the one that happens.
package lateconn

import (
	"net"
	"time"
)

// Conn is a net.Conn whose SetDeadline and SetWriteDeadline hold a deadline in the past back
// until the next zero deadline (or Hold). Build it with New.
type Conn struct {
	net.Conn
	// Hold bounds how long a past deadline waits for a zero one: code that clears the
	// deadline only after the handler finished never sends one, and waits this long.
	Hold time.Duration
	// AfterWrite, when set, is called after every Write: a context it cancels ends right at
	// the end of a write. Set it only while no Write runs.
	AfterWrite func()

	reset   chan struct{} // a zero deadline was set
	pastSet chan struct{} // a past deadline reached the connection
}

// New wraps c.
func New(c net.Conn, hold time.Duration) *Conn {
	return &Conn{Conn: c, Hold: hold, reset: make(chan struct{}, 1), pastSet: make(chan struct{}, 1)}
}

// PastSet receives once for every past deadline that reached the connection.
func (c *Conn) PastSet() <-chan struct{} { return c.pastSet }

func (c *Conn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if c.AfterWrite != nil {
		c.AfterWrite()
	}
	return n, err
}

func (c *Conn) SetDeadline(t time.Time) error { return c.set(t, c.Conn.SetDeadline) }

func (c *Conn) SetWriteDeadline(t time.Time) error { return c.set(t, c.Conn.SetWriteDeadline) }

func (c *Conn) set(t time.Time, apply func(time.Time) error) error {
	switch {
	case t.IsZero():
		select {
		case c.reset <- struct{}{}:
		default:
		}
	case t.Before(time.Now()):
		select {
		case <-c.reset:
		case <-time.After(c.Hold):
		}
		defer func() { c.pastSet <- struct{}{} }()
	}
	return apply(t)
}
