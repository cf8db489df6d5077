//go:build unix

package p2p

import (
	"os"
	"syscall"
)

// ownedByMe reports whether this process's effective user owns the file: a sweep removes only
// what a job of the same user left behind.
func ownedByMe(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
