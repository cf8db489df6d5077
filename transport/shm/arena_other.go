//go:build !linux

package shm

import "context"

// Arena is memory that every rank of a one-host job maps; on this system none can be made.
type Arena struct{}

// FreeBytes fails: arenas need Linux.
func FreeBytes(dir string) (int64, error) { return 0, errNotLinux }

// CreateArena fails: arenas need Linux.
func CreateArena(size int, opts ArenaOptions) (*Arena, error) { return nil, errNotLinux }

// OpenArena fails: arenas need Linux.
func OpenArena(name string, opts ArenaOptions) (*Arena, error) { return nil, errNotLinux }

func (a *Arena) Name() string                                        { return "" }
func (a *Arena) Bytes() []byte                                       { return nil }
func (a *Arena) Mapped(r int) bool                                   { return false }
func (a *Arena) Unlink() error                                       { return nil }
func (a *Arena) Watch()                                              {}
func (a *Arena) Wait(ctx context.Context, off int, old uint32) error { return errNotLinux }
func (a *Arena) Wake(off int)                                        {}
func (a *Arena) Close() error                                        { return nil }
