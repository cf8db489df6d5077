// Package rawsock reads and writes non-blocking sockets with raw system calls, parking in Go's
// network poller (with the connection's deadlines) while a socket is not ready. A rank whose
// host has more ranks than cores runs with one processor, and a read or write through
// net.Conn tells the scheduler that the thread may block, which wakes the runtime's monitor
// thread and can hand the rank's processor to another thread on every call; a raw call on a
// socket that never blocks keeps it (see Sock).
//
// The stream endpoint of package transport reads and writes its sockets through a Sock, and a
// transport/shm pipe reads its doorbell link through one. The package must never block a
// thread in a system call: a socket that is not ready parks the goroutine in the poller.
package rawsock
